package symbolize

import (
	"debug/dwarf"
	"errors"
	"sort"

	"github.com/heaplens/heaplens/internal/capture"
)

// unit is one decoded compilation unit: its line table as address intervals
// and the tree of functions with code (subprograms and the inlined
// subroutines inside them).
type unit struct {
	files    []string  // line table file names by index, for DW_AT_call_file
	rowFiles []string  // file names the rows refer to
	rows     []lineRow // sorted by addr
	nodes    []node
	tops     []nodeRange // ranges of out-of-line functions, sorted by low
}

// lineRow says that [addr, end) comes from rowFiles[file]:line. It holds no
// pointers, so a big CU's rows cost the garbage collector nothing.
type lineRow struct {
	addr, end uint64
	file      int32 // index into unit.rowFiles, -1 if none
	line      int32
}

// node is a subprogram or inlined subroutine with code.
type node struct {
	ranges   [][2]uint64
	children []int32 // inlined subroutines directly inside, through lexical blocks
	fn       funcInfo
	name     string // fn resolved by dwarfData.funcName, once named is set
	named    bool
	callFile int // DW_AT_call_file of an inlined subroutine, -1 if absent
	callLine int
}

// nodeRange is one address range of a top-level node.
type nodeRange struct {
	low, high uint64
	node      int32
}

// funcInfo is what a DIE says about its function's name.
type funcInfo struct {
	name    string       // DW_AT_name
	linkage string       // DW_AT_linkage_name or DW_AT_MIPS_linkage_name
	origin  dwarf.Offset // DW_AT_abstract_origin or DW_AT_specification, 0 if none
}

const attrMIPSLinkageName dwarf.Attr = 0x2007

func newFuncInfo(e *dwarf.Entry) funcInfo {
	var fi funcInfo
	fi.name, _ = e.Val(dwarf.AttrName).(string)
	fi.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
	if fi.linkage == "" {
		fi.linkage, _ = e.Val(attrMIPSLinkageName).(string)
	}
	if o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
		fi.origin = o
	} else if o, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
		fi.origin = o
	}
	return fi
}

// maxDepth bounds DIE nesting; real code stays far below it.
const maxDepth = 1 << 10

// decodeUnit decodes the line table and function tree of the CU whose DIE
// is at off. Types, variables and parameters are skipped (using DW_AT_sibling
// where the producer emitted it), which is most of a CU's DIEs.
func decodeUnit(d *dwarf.Data, off dwarf.Offset) (*unit, error) {
	r := d.Reader()
	r.Seek(off)
	cu, err := r.Next()
	if err != nil {
		return nil, err
	}
	if cu == nil || cu.Tag != dwarf.TagCompileUnit {
		return nil, errors.New("not a compile unit")
	}
	u := new(unit)
	if err := u.readLines(d, cu); err != nil {
		// Keep going: functions without lines are still worth names.
		u.rows = nil
	}
	if !cu.Children {
		return u, nil
	}

	// ctx[i] is the innermost function node enclosing depth i, -1 for none.
	ctx := []int32{-1}
	for len(ctx) > 0 {
		e, err := r.Next()
		if err != nil {
			return u, err
		}
		if e == nil || e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			break // ran off the end of a unit missing its terminators
		}
		if e.Tag == 0 {
			ctx = ctx[:len(ctx)-1]
			continue
		}
		cur := ctx[len(ctx)-1]
		next, descend := cur, false
		switch e.Tag {
		case dwarf.TagSubprogram:
			rs, _ := d.Ranges(e)
			if rs = validRanges(rs); len(rs) > 0 {
				// Out of line code, even when nested (GNU C
				// nested functions): a new top-level node.
				next = u.addNode(e, rs, -1)
				descend = true
			}
		case dwarf.TagInlinedSubroutine:
			rs, _ := d.Ranges(e)
			if rs = validRanges(rs); len(rs) > 0 {
				next = u.addNode(e, rs, cur)
			}
			descend = true
		case dwarf.TagLexDwarfBlock, dwarf.TagNamespace, dwarf.TagModule,
			dwarf.TagTryDwarfBlock, dwarf.TagCatchDwarfBlock:
			descend = true
		}
		if !e.Children {
			continue
		}
		if !descend || len(ctx) >= maxDepth {
			r.SkipChildren()
			continue
		}
		ctx = append(ctx, next)
	}
	sort.Slice(u.tops, func(i, j int) bool { return u.tops[i].low < u.tops[j].low })
	return u, nil
}

// validRanges drops empty and inverted ranges.
func validRanges(rs [][2]uint64) [][2]uint64 {
	out := rs[:0]
	for _, r := range rs {
		if r[1] > r[0] {
			out = append(out, r)
		}
	}
	return out
}

// addNode records a function DIE with code; parent < 0 makes it top-level.
func (u *unit) addNode(e *dwarf.Entry, rs [][2]uint64, parent int32) int32 {
	n := node{ranges: rs, fn: newFuncInfo(e), callFile: -1}
	if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok {
		n.callFile = int(v)
	}
	if v, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
		n.callLine = int(v)
	}
	idx := int32(len(u.nodes))
	u.nodes = append(u.nodes, n)
	if parent >= 0 {
		u.nodes[parent].children = append(u.nodes[parent].children, idx)
	} else {
		for _, r := range rs {
			u.tops = append(u.tops, nodeRange{r[0], r[1], idx})
		}
	}
	return idx
}

// readLines decodes the CU's line program into address intervals.
func (u *unit) readLines(d *dwarf.Data, cu *dwarf.Entry) error {
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return err
	}
	// Rows name files by index; consecutive rows mostly share a file, so
	// remember the last one before consulting the map.
	fileIdx := make(map[*dwarf.LineFile]int32)
	var lastFile *dwarf.LineFile
	lastIdx := int32(-1)
	index := func(f *dwarf.LineFile) int32 {
		if f == lastFile {
			return lastIdx
		}
		i, ok := fileIdx[f]
		if !ok {
			i = int32(len(u.rowFiles))
			u.rowFiles = append(u.rowFiles, f.Name)
			fileIdx[f] = i
		}
		lastFile, lastIdx = f, i
		return i
	}
	var prev, le dwarf.LineEntry
	have := false
	for {
		if err := lr.Next(&le); err != nil {
			break // io.EOF or a damaged program: keep what we have
		}
		if have && !prev.EndSequence && le.Address > prev.Address {
			row := lineRow{addr: prev.Address, end: le.Address, line: int32(prev.Line), file: -1}
			if prev.File != nil {
				row.file = index(prev.File)
			}
			u.rows = append(u.rows, row)
		}
		prev, have = le, true
	}
	for _, f := range lr.Files() {
		name := ""
		if f != nil {
			name = f.Name
		}
		u.files = append(u.files, name)
	}
	sort.SliceStable(u.rows, func(i, j int) bool { return u.rows[i].addr < u.rows[j].addr })
	return nil
}

// row returns the line row covering pc.
func (u *unit) row(pc uint64) (lineRow, bool) {
	i := sort.Search(len(u.rows), func(i int) bool { return u.rows[i].addr > pc }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if r := u.rows[j]; pc >= r.addr && pc < r.end {
			return r, true
		}
	}
	return lineRow{}, false
}

// rowFile returns the file name of row, "" if unknown.
func (u *unit) rowFile(r lineRow) string {
	if r.file < 0 || int(r.file) >= len(u.rowFiles) {
		return ""
	}
	return u.rowFiles[r.file]
}

func (n *node) contains(pc uint64) bool {
	for _, r := range n.ranges {
		if pc >= r[0] && pc < r[1] {
			return true
		}
	}
	return false
}

// top returns the out-of-line function containing pc, or -1.
func (u *unit) top(pc uint64) int32 {
	i := sort.Search(len(u.tops), func(i int) bool { return u.tops[i].low > pc }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if t := u.tops[j]; pc >= t.low && pc < t.high {
			return t.node
		}
	}
	return -1
}

// lookup returns the frames at pc, innermost first. The innermost frame
// takes its position from the line table; each enclosing frame is at the
// call site recorded on the inlined subroutine it contains.
func (u *unit) lookup(dd *dwarfData, pc uint64) []capture.Line {
	row, rowOK := u.row(pc)
	var chain []int32
	for n := u.top(pc); n >= 0 && len(chain) < maxDepth; {
		chain = append(chain, n)
		next := int32(-1)
		for _, c := range u.nodes[n].children {
			if u.nodes[c].contains(pc) {
				next = c
				break
			}
		}
		n = next
	}
	if len(chain) == 0 {
		if !rowOK {
			return nil
		}
		return []capture.Line{{File: u.rowFile(row), Line: int(row.line)}}
	}
	lines := make([]capture.Line, 0, len(chain))
	for i := len(chain) - 1; i >= 0; i-- {
		n := &u.nodes[chain[i]]
		if !n.named {
			n.name, n.named = dd.funcName(&n.fn), true
		}
		l := capture.Line{Function: n.name}
		if i == len(chain)-1 {
			l.File, l.Line = u.rowFile(row), int(row.line)
		} else {
			callee := &u.nodes[chain[i+1]]
			l.Line = callee.callLine
			if callee.callFile >= 0 && callee.callFile < len(u.files) {
				l.File = u.files[callee.callFile]
			}
		}
		lines = append(lines, l)
	}
	return lines
}
