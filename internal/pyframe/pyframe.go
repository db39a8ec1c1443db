// Package pyframe turns raw CPython code-object data, copied out of a target
// process by the heaplens C library without interpretation, into Python
// source lines and names.
//
// The C library sends, per Python frame, a position read from the frame, and
// once per code object the interpreter's minor version, co_firstlineno, the
// raw bytes of the line table and the PEP 393 data of co_filename, co_name
// and (3.11+) co_qualname. This package decodes those bytes with the same
// algorithms CPython uses, so the results match frame.f_lineno, co_lines()
// and co_positions() of the interpreter that produced them.
//
// Positions are in the unit the frame stores:
//
//	3.8, 3.9      f_lasti, a byte offset
//	3.10          f_lasti, an index in 2-byte code units
//	3.11 – 3.15   (prev_instr or instr_ptr − co_code_adaptive) / 2, a code unit index
//
// A negative position means the frame has not started (or is incomplete).
//
// Line tables come from untrusted memory: every decoder here is bounded by
// the table length and never panics, whatever the bytes.
package pyframe

import (
	"math"
	"sort"
)

// Minimum and maximum supported minor versions of Python 3.
const (
	minMinor = 8
	maxMinor = 15
)

// Supported reports whether the line-table and position formats of Python
// 3.minor are known to this package (3.8 through 3.15).
func Supported(minor int) bool {
	return minor >= minMinor && minor <= maxMinor
}

// noLine marks a range for which the table explicitly says "no line"
// (ldelta −128 in 3.10, a NONE entry in 3.11+). Real line numbers are never
// negative in tables CPython writes; garbage may produce any value, which is
// returned as is because it cannot be told from a real line.
const noLine = math.MinInt

// Table is a line table decoded once into sorted ranges, so that each lookup
// is a binary search instead of a walk over the raw bytes.
//
// The zero Table and a nil *Table are valid and map every position to line 0.
type Table struct {
	// starts[i] is the first table unit (bytes for 3.8–3.10, code units for
	// 3.11+) of range i; range i ends where range i+1 starts, the last one at
	// end. starts[0] is 0 whenever starts is non-empty.
	starts []int64
	// lines[i] is the line of range i, or noLine.
	lines []int
	// end is one past the last covered table unit; positions at or beyond
	// it have no line. It is math.MaxInt64 for lnotab (3.8/3.9), whose
	// last line extends without bound, as in PyCode_Addr2Line.
	end int64
	// scale converts a position to table units: 2 for 3.10 (instruction
	// index → byte offset), else 1.
	scale     int64
	firstLine int
}

// NewTable decodes the raw line table of a code object of Python 3.minor
// whose co_firstlineno is firstLine. table is co_lnotab for 3.8 and 3.9 and
// co_linetable for 3.10 and later (3.10+ still expose a co_lnotab attribute,
// but only as an emulation; it is not what the C library reads).
//
// For unsupported versions the returned Table maps every position to
// firstLine. Malformed tables decode as far as they are well formed;
// positions past that point map to firstLine.
func NewTable(minor int, table []byte, firstLine int) *Table {
	t := &Table{firstLine: firstLine, scale: 1}
	// Presize for one range per entry (pairs are 2 bytes, location entries
	// typically 2–3) so decoding allocates about once; merging same-line
	// entries only ever uses less.
	n := len(table)/3 + 2
	if minor <= 10 {
		n = len(table)/2 + 2
	}
	t.starts = make([]int64, 0, n)
	t.lines = make([]int, 0, n)
	switch {
	case minor == 8 || minor == 9:
		t.decodeLnotab(table)
	case minor == 10:
		t.scale = 2
		t.decodeLinetable310(table)
	case minor >= 11 && minor <= maxMinor:
		t.decodeLocations(table)
	}
	return t
}

// Line returns the source line for position pos (in the units described in
// the package documentation) of a code object of Python 3.minor.
//
// It returns firstLine when pos is negative (a frame that has not started;
// CPython's PyCode_Addr2Line does the same), when the table marks pos as
// having no line (CPython's f_lineno would be None), when pos lies past the
// end of a 3.10+ table or past the well-formed part of a malformed one, and
// when minor is not Supported.
//
// Line decodes the whole table on each call; callers looking up many
// positions of one code object should keep a Table from NewTable.
func Line(minor int, table []byte, firstLine int, pos int64) int {
	return NewTable(minor, table, firstLine).Line(pos)
}

// Line returns the source line for position pos, with the fallbacks
// documented on the package-level Line.
func (t *Table) Line(pos int64) int {
	line, ok := t.Lookup(pos)
	if !ok {
		if t == nil {
			return 0
		}
		return t.firstLine
	}
	return line
}

// Lookup is like Line but reports whether the table gives a line for pos;
// when ok is false, line is 0 and Line would return co_firstlineno.
func (t *Table) Lookup(pos int64) (line int, ok bool) {
	if t == nil || pos < 0 || len(t.starts) == 0 {
		return 0, false
	}
	if pos > math.MaxInt64/t.scale {
		return 0, false
	}
	u := pos * t.scale
	if u >= t.end {
		return 0, false
	}
	// starts[0] == 0 <= u, so i >= 0.
	i := sort.Search(len(t.starts), func(i int) bool { return t.starts[i] > u }) - 1
	if t.lines[i] == noLine {
		return 0, false
	}
	return t.lines[i], true
}

// FirstLine returns the co_firstlineno the table was built with.
func (t *Table) FirstLine() int {
	if t == nil {
		return 0
	}
	return t.firstLine
}

// push appends range [start, …) with line, merging it into the previous
// range when the line is the same and overwriting a previous range that
// starts at the same unit (which would be empty).
func (t *Table) push(start int64, line int) {
	n := len(t.starts)
	if n > 0 && t.starts[n-1] == start {
		t.lines[n-1] = line
		// The overwrite may have made it equal to its predecessor.
		if n > 1 && t.lines[n-2] == line {
			t.starts = t.starts[:n-1]
			t.lines = t.lines[:n-1]
		}
		return
	}
	if n > 0 && t.lines[n-1] == line {
		return
	}
	t.starts = append(t.starts, start)
	t.lines = append(t.lines, line)
}

// decodeLnotab decodes a 3.8/3.9 co_lnotab (Objects/lnotab_notes.txt):
// pairs (addr_incr uint8, line_incr int8). PyCode_Addr2Line applies every
// pair whose cumulative address is <= the target, so the line for address a
// is the line after the last pair with cumulative address <= a. A trailing
// odd byte is ignored, as CPython does (size = len/2).
func (t *Table) decodeLnotab(b []byte) {
	line := t.firstLine
	addr := int64(0)
	t.push(0, line)
	for i := 0; i+1 < len(b); i += 2 {
		addr += int64(b[i])
		line += int(int8(b[i+1]))
		t.push(addr, line)
	}
	t.end = math.MaxInt64
}

// decodeLinetable310 decodes a 3.10 co_linetable (PEP 626): pairs
// (sdelta uint8, ldelta int8), each describing the next half-open byte range
// [end, end+sdelta). ldelta −128 means the range has no line and leaves the
// running line unchanged. Zero-length ranges only move the running line.
func (t *Table) decodeLinetable310(b []byte) {
	line := t.firstLine
	end := int64(0)
	for i := 0; i+1 < len(b); i += 2 {
		start := end
		end += int64(b[i])
		ld := int8(b[i+1])
		this := noLine
		if ld != -128 {
			line += int(ld)
			this = line
		}
		if end > start {
			t.push(start, this)
		}
	}
	t.end = end
}

// Location table entry codes (Objects/locations.md, 3.11+).
const (
	locShortMax  = 9  // 0–9: short form, same line, 1 column byte
	locOneLine0  = 10 // 10–12: line delta 0–2, 2 column bytes
	locOneLine2  = 12
	locNoColumns = 13 // svarint line delta
	locLong      = 14 // svarint line delta + 3 varints
	locNone      = 15 // no location; running line unchanged
)

// decodeLocations decodes a 3.11+ co_linetable (PEP 657 location table).
// Each entry starts with a byte 1cccclll: code c, length l+1 code units.
// Decoding stops at the first byte that cannot start an entry (CPython
// never writes one; it means garbage) or at a line delta cut off by the end
// of the table. Column bytes cut off at the end do not matter for the line.
func (t *Table) decodeLocations(b []byte) {
	line := t.firstLine
	start := int64(0)
	p := 0
	for p < len(b) {
		first := b[p]
		if first&0x80 == 0 {
			break
		}
		p++
		code := int(first>>3) & 15
		length := int64(first&7) + 1
		this := line
		switch {
		case code <= locShortMax:
			p++
		case code <= locOneLine2:
			line += code - locOneLine0
			this = line
			p += 2
		case code == locNoColumns || code == locLong:
			d, n, ok := readSvarint(b[p:])
			if !ok {
				t.end = start
				return
			}
			p += n
			line += d
			this = line
			if code == locLong {
				for k := 0; k < 3; k++ {
					p += skipVarint(b[min(p, len(b)):])
				}
			}
		default: // locNone
			this = noLine
		}
		t.push(start, this)
		start += length
	}
	t.end = start
}

// readVarint reads a location-table varint: 6-bit little-endian chunks, bit
// 6 set when more follow. Bit 7 is ignored, as in CPython's read_varint.
// Like CPython it accumulates into 32 bits; chunks beyond bit 31 are dropped
// instead of shifted out undefinedly. ok is false if the table ends first.
func readVarint(b []byte) (v uint32, n int, ok bool) {
	shift := uint(0)
	for n < len(b) {
		c := b[n]
		n++
		if shift < 32 {
			v |= uint32(c&63) << shift
		}
		shift += 6
		if c&64 == 0 {
			return v, n, true
		}
	}
	return v, n, false
}

// readSvarint reads a signed varint: the low bit of the varint is the sign.
func readSvarint(b []byte) (v int, n int, ok bool) {
	u, n, ok := readVarint(b)
	if u&1 != 0 {
		return -int(u >> 1), n, ok
	}
	return int(u >> 1), n, ok
}

// skipVarint returns how many bytes the varint at the start of b occupies,
// up to len(b).
func skipVarint(b []byte) int {
	_, n, _ := readVarint(b)
	return n
}
