package symbolize

import (
	"bytes"
	"compress/zlib"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/heaplens/heaplens/internal/capture"
)

// dwarfData is the lazily decoded DWARF of one file: an index from address
// ranges to compilation units built once, and the units decoded so far.
type dwarfData struct {
	d     *dwarf.Data
	cus   []cuRange               // sorted by low
	units map[dwarf.Offset]*unit  // decoded CUs by DIE offset; nil value = undecodable
	names map[dwarf.Offset]string // resolved function names by DIE offset
}

// cuRange says that [low, high) belongs to the CU whose DIE is at off.
type cuRange struct {
	low, high uint64
	off       dwarf.Offset
}

// loadDWARF reads the debug sections of ef and indexes its CUs. Only the
// sections symbolization needs are read: location lists, frame info and
// type units are left on disk. ra reads the file behind ef (nil: let
// debug/elf inflate compressed sections).
func loadDWARF(ef *elf.File, ra io.ReaderAt) (dd *dwarfData, err error) {
	defer func() {
		if r := recover(); r != nil {
			dd, err = nil, fmt.Errorf("malformed DWARF: %v", r)
		}
	}()
	sec := func(name string) ([]byte, error) { return debugSection(ef, ra, name) }
	var data [8][]byte
	for i, name := range []string{"abbrev", "info", "line", "str", "ranges", "aranges"} {
		if data[i], err = sec(name); err != nil {
			return nil, err
		}
	}
	if len(data[1]) == 0 {
		return nil, errors.New("no .debug_info")
	}
	d, err := dwarf.New(data[0], nil, nil, data[1], data[2], nil, data[4], data[3])
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
		b, err := sec(name)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, err
			}
		}
	}
	dd = &dwarfData{
		d:     d,
		units: make(map[dwarf.Offset]*unit),
		names: make(map[dwarf.Offset]string),
	}
	dd.index(data[1], data[5], ef.ByteOrder)
	return dd, nil
}

// debugSection returns the contents of .debug_<name> (decompressed if
// SHF_COMPRESSED) or of the older .zdebug_<name> form; nil if absent.
func debugSection(ef *elf.File, ra io.ReaderAt, name string) ([]byte, error) {
	if s := ef.Section(".debug_" + name); s != nil {
		if s.Type == elf.SHT_NOBITS {
			return nil, nil
		}
		b, err := sectionData(ef, ra, s)
		if err != nil {
			return nil, fmt.Errorf("section .debug_%s: %w", name, err)
		}
		return b, nil
	}
	s := ef.Section(".zdebug_" + name)
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	b, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("section .zdebug_%s: %w", name, err)
	}
	if len(b) < 12 || string(b[:4]) != "ZLIB" {
		return b, nil
	}
	size := binary.BigEndian.Uint64(b[4:12])
	if size > 1<<32 || size > uint64(len(b))*1024 {
		return nil, fmt.Errorf("section .zdebug_%s: implausible size %d", name, size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(b[12:]))
	if err != nil {
		return nil, fmt.Errorf("section .zdebug_%s: %w", name, err)
	}
	out := make([]byte, size)
	if _, err := io.ReadFull(zr, out); err != nil {
		return nil, fmt.Errorf("section .zdebug_%s: %w", name, err)
	}
	return out, nil
}

// index builds dd.cus from .debug_aranges, and from the CU DIEs' own ranges
// for the CUs that aranges does not describe (or all of them when there is
// no aranges section). Only unit headers and CU DIEs are decoded here.
func (dd *dwarfData) index(info, aranges []byte, bo binary.ByteOrder) {
	units := unitHeaders(info, bo)
	dieOff := make(map[uint64]dwarf.Offset, len(units))
	for _, u := range units {
		dieOff[u.header] = u.die
	}
	covered := make(map[dwarf.Offset]bool)
	for _, a := range parseAranges(aranges, bo) {
		off, ok := dieOff[a.info]
		if !ok || a.high <= a.low {
			continue
		}
		dd.cus = append(dd.cus, cuRange{a.low, a.high, off})
		covered[off] = true
	}
	r := dd.d.Reader()
	for _, u := range units {
		if covered[u.die] || !u.code {
			continue
		}
		r.Seek(u.die)
		e, err := r.Next()
		if err != nil || e == nil || e.Tag != dwarf.TagCompileUnit {
			continue
		}
		rs, err := dd.d.Ranges(e)
		if err != nil {
			continue
		}
		for _, rg := range rs {
			if rg[1] > rg[0] {
				dd.cus = append(dd.cus, cuRange{rg[0], rg[1], u.die})
			}
		}
	}
	sort.Slice(dd.cus, func(i, j int) bool { return dd.cus[i].low < dd.cus[j].low })
}

// unitHeader locates one unit of .debug_info.
type unitHeader struct {
	header uint64       // offset of the unit header (what aranges refers to)
	die    dwarf.Offset // offset of the unit's first DIE
	code   bool         // a compile or partial unit (not a type unit)
}

// unitHeaders walks the unit headers of .debug_info. debug/dwarf keeps this
// table private, and aranges names units by header offset while
// dwarf.Reader.Seek wants DIE offsets.
func unitHeaders(info []byte, bo binary.ByteOrder) []unitHeader {
	var out []unitHeader
	off := uint64(0)
	for off+11 <= uint64(len(info)) {
		b := info[off:]
		length := uint64(bo.Uint32(b))
		hdr, offSize := uint64(4), uint64(4)
		if length == 0xffffffff {
			if len(b) < 12 {
				break
			}
			length = bo.Uint64(b[4:])
			hdr, offSize = 12, 8
		} else if length >= 0xfffffff0 {
			break
		}
		end := off + hdr + length
		if length == 0 || end > uint64(len(info)) || end < off {
			break
		}
		if hdr+2 > uint64(len(b)) {
			break
		}
		vers := bo.Uint16(b[hdr:])
		pos := hdr + 2
		code := true
		switch {
		case vers >= 2 && vers <= 4:
			pos += offSize + 1 // abbrev offset, address size
		case vers == 5:
			if pos >= uint64(len(b)) {
				return out
			}
			utype := b[pos]
			pos += 2 + offSize // unit type, address size, abbrev offset
			switch utype {
			case 0x04, 0x05: // DW_UT_skeleton, DW_UT_split_compile
				pos += 8
			case 0x02, 0x06: // DW_UT_type, DW_UT_split_type
				pos += 8 + offSize
				code = false
			}
		default:
			code = false
		}
		if off+pos < end {
			out = append(out, unitHeader{header: off, die: dwarf.Offset(off + pos), code: code})
		}
		off = end
	}
	return out
}

// arange is one address range of .debug_aranges.
type arange struct {
	low, high uint64
	info      uint64 // unit header offset in .debug_info
}

// parseAranges decodes .debug_aranges; it stops quietly at the first
// malformed set, so a damaged section only loses coverage (the CU walk in
// index then fills in).
func parseAranges(b []byte, bo binary.ByteOrder) []arange {
	var out []arange
	for len(b) >= 4 {
		length := uint64(bo.Uint32(b))
		hdr, offSize := 4, 4
		if length == 0xffffffff {
			if len(b) < 12 {
				break
			}
			length = bo.Uint64(b[4:])
			hdr, offSize = 12, 8
		}
		if length > uint64(len(b)-hdr) {
			break
		}
		set := b[hdr : hdr+int(length)]
		b = b[hdr+int(length):]
		if len(set) < 2+offSize+2 {
			continue
		}
		var info uint64
		if offSize == 4 {
			info = uint64(bo.Uint32(set[2:]))
		} else {
			info = bo.Uint64(set[2:])
		}
		addrSize, segSize := int(set[2+offSize]), int(set[3+offSize])
		if addrSize != 4 && addrSize != 8 || segSize != 0 {
			continue
		}
		// Tuples start at a multiple of twice the address size from the
		// start of the set (including its length field).
		tup := 2 * addrSize
		pos := hdr + 2 + offSize + 2
		pos = (pos + tup - 1) / tup * tup
		pos -= hdr
		read := func(p []byte) uint64 {
			if addrSize == 4 {
				return uint64(bo.Uint32(p))
			}
			return bo.Uint64(p)
		}
		for pos+tup <= len(set) {
			addr, n := read(set[pos:]), read(set[pos+addrSize:])
			pos += tup
			if addr == 0 && n == 0 {
				break
			}
			if n > 0 && addr+n > addr {
				out = append(out, arange{addr, addr + n, info})
			}
		}
	}
	return out
}

// maxOverlapScan bounds the backwards walk over CU ranges that overlap
// (ranges of functions discarded by the linker pile up near address 0).
const maxOverlapScan = 8

// lookup returns the DWARF frames at pc, innermost first, or nil. A panic
// while decoding costs only this lookup.
func (dd *dwarfData) lookup(pc uint64) (lines []capture.Line) {
	defer func() {
		if r := recover(); r != nil {
			lines = nil
		}
	}()
	i := sort.Search(len(dd.cus), func(i int) bool { return dd.cus[i].low > pc }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		c := dd.cus[j]
		if pc < c.low || pc >= c.high {
			continue
		}
		u := dd.unit(c.off)
		if u == nil {
			continue
		}
		if lines = u.lookup(dd, pc); len(lines) > 0 {
			return lines
		}
	}
	return nil
}

// unit returns the decoded CU at off, decoding it on first use.
func (dd *dwarfData) unit(off dwarf.Offset) *unit {
	if u, ok := dd.units[off]; ok {
		return u
	}
	// Remember an undecodable unit (error or panic) so that later lookups
	// do not pay for it again.
	dd.units[off] = nil
	u, err := decodeUnit(dd.d, off)
	if err != nil {
		return nil
	}
	dd.units[off] = u
	return u
}

// maxOriginDepth bounds abstract_origin/specification chains, which a
// corrupt file could make circular.
const maxOriginDepth = 8

// funcName names a function DIE: its linkage name demangled when it has one
// (qualified, with template arguments), else what its abstract origin or
// specification is called, else its DW_AT_name.
func (dd *dwarfData) funcName(f *funcInfo) string {
	if f.linkage != "" {
		return demangleName(f.linkage)
	}
	if f.origin != 0 {
		if n := dd.nameAt(f.origin, 1); n != "" {
			return n
		}
	}
	return f.name
}

// nameAt resolves the name of the DIE at off, memoized.
func (dd *dwarfData) nameAt(off dwarf.Offset, depth int) string {
	if n, ok := dd.names[off]; ok {
		return n
	}
	if depth > maxOriginDepth {
		return ""
	}
	dd.names[off] = "" // guards against cycles while resolving
	r := dd.d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil || e == nil {
		return ""
	}
	fi := newFuncInfo(e)
	var n string
	switch {
	case fi.linkage != "":
		n = demangleName(fi.linkage)
	case fi.origin != 0:
		n = dd.nameAt(fi.origin, depth+1)
	}
	if n == "" {
		n = fi.name
	}
	dd.names[off] = n
	return n
}
