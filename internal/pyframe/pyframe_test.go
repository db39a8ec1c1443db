package pyframe

import (
	"encoding/binary"
	"math"
	"testing"
)

// Encoders for hand-built tables. They write what CPython's compiler writes,
// so tests can state line numbers instead of bytes.

// lnotab builds a 3.8/3.9 co_lnotab from (addr_incr, line_incr) pairs.
func lnotab(pairs ...int) []byte {
	var b []byte
	for _, p := range pairs {
		b = append(b, byte(p))
	}
	return b
}

// loc builds 3.11+ location-table entries.
type loc struct{ b []byte }

func (l *loc) head(code, length int) { l.b = append(l.b, byte(0x80|code<<3|(length-1))) }

func (l *loc) varint(v uint32) {
	for v >= 64 {
		l.b = append(l.b, byte(64|v&63))
		v >>= 6
	}
	l.b = append(l.b, byte(v))
}

func (l *loc) svarint(v int) {
	if v < 0 {
		l.varint(uint32(-v)<<1 | 1)
	} else {
		l.varint(uint32(v) << 1)
	}
}

func (l *loc) short(length int) *loc { l.head(0, length); l.b = append(l.b, 0x12); return l }
func (l *loc) oneLine(delta, length int) *loc {
	l.head(locOneLine0+delta, length)
	l.b = append(l.b, 4, 9)
	return l
}
func (l *loc) noCols(delta, length int) *loc {
	l.head(locNoColumns, length)
	l.svarint(delta)
	return l
}
func (l *loc) long(delta, length int) *loc {
	l.head(locLong, length)
	l.svarint(delta)
	l.varint(3)
	l.varint(5)
	l.varint(70)
	return l
}
func (l *loc) none(length int) *loc { l.head(locNone, length); return l }

func TestLine(t *testing.T) {
	long := (&loc{}).long(-1, 1).oneLine(1, 3).short(8).none(2).noCols(300, 2).oneLine(0, 1).long(-300, 4).b
	tests := []struct {
		name  string
		minor int
		table []byte
		first int
		pos   int64
		want  int
	}{
		// 3.8/3.9: byte offsets; the line of the last pair at or before pos.
		{"lnotab/neg", 8, lnotab(6, 1, 8, 2), 10, -1, 10},
		{"lnotab/start", 8, lnotab(6, 1, 8, 2), 10, 0, 10},
		{"lnotab/before-first-change", 8, lnotab(6, 1, 8, 2), 10, 4, 10},
		{"lnotab/at-change", 9, lnotab(6, 1, 8, 2), 10, 6, 11},
		{"lnotab/at-second", 9, lnotab(6, 1, 8, 2), 10, 14, 13},
		{"lnotab/past-end", 9, lnotab(6, 1, 8, 2), 10, 1000, 13},
		{"lnotab/addr0-pair", 8, lnotab(0, 3, 4, 1), 10, 0, 13},
		{"lnotab/negative-delta", 8, lnotab(4, 5, 4, 0xfe), 10, 8, 13},
		{"lnotab/big-line-split", 8, lnotab(2, 127, 0, 127, 0, 50), 1, 2, 305},
		{"lnotab/big-addr-split", 8, lnotab(255, 0, 255, 0, 10, 1), 1, 519, 1},
		{"lnotab/big-addr-split-at", 8, lnotab(255, 0, 255, 0, 10, 1), 1, 520, 2},
		{"lnotab/odd-length", 8, []byte{4, 1, 7}, 5, 100, 6},
		{"lnotab/empty", 9, nil, 5, 100, 5},
		// 3.10: instruction index; ranges are in bytes.
		{"310/first", 10, []byte{4, 1, 6, 2}, 20, 0, 21},
		{"310/second-range", 10, []byte{4, 1, 6, 2}, 20, 2, 23},
		{"310/past-end", 10, []byte{4, 1, 6, 2}, 20, 5, 20},
		{"310/no-line", 10, []byte{4, 1, 2, 0x80, 2, 1}, 20, 2, 20},
		// −128 leaves the running line alone: the next range is 21+1.
		{"310/after-no-line", 10, []byte{4, 1, 2, 0x80, 2, 1}, 20, 3, 22},
		{"310/zero-length-moves-line", 10, []byte{0, 5, 2, 1}, 20, 0, 26},
		{"310/neg", 10, []byte{4, 1}, 20, -1, 20},
		{"310/huge-pos", 10, []byte{4, 1}, 20, math.MaxInt64, 20},
		// 3.11+: code units.
		{"311/long-neg", 11, long, 7, 0, 6},
		{"311/oneline", 11, long, 7, 1, 7},
		{"311/oneline-end", 11, long, 7, 3, 7},
		{"311/short", 11, long, 7, 4, 7},
		{"311/none", 12, long, 7, 12, 7},
		// NONE does not poison the running line (OTel's bug, §10).
		{"311/after-none", 12, long, 7, 14, 307},
		{"311/oneline0", 13, long, 7, 16, 307},
		{"311/long-back", 13, long, 7, 17, 7},
		{"311/last", 13, long, 7, 20, 7},
		{"311/past-end", 13, long, 7, 21, 7},
		{"311/neg", 13, long, 7, -5, 7},
		// An entry start is inside that entry (py-spy's boundary bug, §10).
		{"311/entry-start", 13, (&loc{}).oneLine(1, 2).oneLine(1, 2).b, 1, 2, 3},
		// Garbage.
		{"311/lost-sync-before", 11, append((&loc{}).oneLine(1, 2).b, 0x05, 0x90, 0), 1, 1, 2},
		{"311/lost-sync-after", 11, append((&loc{}).oneLine(1, 2).b, 0x05, 0x90, 0), 1, 2, 1},
		{"311/truncated-varint", 11, append((&loc{}).oneLine(1, 2).b, 0x80|locNoColumns<<3, 0x41), 1, 2, 1},
		{"311/truncated-columns", 11, []byte{0x80 | (locOneLine0+1)<<3 | 1, 3}, 1, 1, 2},
		{"311/huge-varint", 11, append([]byte{0x80 | locNoColumns<<3}, 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x3f), 1, 0, 1 + 0x7fffffff},
		{"unsupported/7", 7, lnotab(2, 1), 3, 4, 3},
		{"unsupported/14", 14, lnotab(2, 1), 3, 4, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Line(tt.minor, tt.table, tt.first, tt.pos); got != tt.want {
				t.Errorf("Line(3.%d, % x, %d, %d) = %d, want %d", tt.minor, tt.table, tt.first, tt.pos, got, tt.want)
			}
			if got := refLine(tt.minor, tt.table, tt.first, tt.pos); got != tt.want {
				t.Errorf("reference decoder gives %d, want %d", got, tt.want)
			}
		})
	}
}

func TestNilTable(t *testing.T) {
	var tab *Table
	if got := tab.Line(3); got != 0 {
		t.Errorf("nil Table: Line = %d, want 0", got)
	}
	if got := (&Table{}).Line(3); got != 0 {
		t.Errorf("zero Table: Line = %d, want 0", got)
	}
	if got := NewTable(12, nil, 9).Line(0); got != 9 {
		t.Errorf("empty 3.12 table: Line = %d, want firstLine 9", got)
	}
}

func TestSupported(t *testing.T) {
	for minor := -1; minor < 20; minor++ {
		want := minor >= 8 && minor <= 15
		if got := Supported(minor); got != want {
			t.Errorf("Supported(%d) = %v, want %v", minor, got, want)
		}
	}
}

func TestDecodeString(t *testing.T) {
	u16 := func(v ...uint16) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, x)
		}
		return b
	}
	u32 := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	tests := []struct {
		name string
		kind uint8
		data []byte
		want string
	}{
		{"ascii", 1, []byte("main.py"), "main.py"},
		{"empty", 1, nil, ""},
		{"latin1", 1, []byte{'f', 0xfc, 'n', 'f'}, "fünf"},
		{"latin1-high", 1, []byte{0xff, 0x80}, "ÿ\u0080"},
		{"ucs2", 2, u16('f', 0xfc, 0x51fd, 0x6570), "fü函数"},
		{"ucs2-lone-high", 2, u16('a', 0xd83d, 'b'), "a\ufffdb"},
		{"ucs2-lone-low", 2, u16(0xde00), "\ufffd"},
		// A pair in UCS-2 data is two code points in Python, not one.
		{"ucs2-pair-is-two", 2, u16(0xd83d, 0xde00), "\ufffd\ufffd"},
		{"ucs2-odd", 2, append(u16('x'), 0x41), "x\ufffd"},
		{"ucs4", 4, u32('a', 0x1f40d, 0x2000b), "a🐍𠀋"},
		{"ucs4-surrogate", 4, u32(0xd800, 'z'), "\ufffdz"},
		{"ucs4-too-big", 4, u32(0x110000, 0xffffffff), "\ufffd\ufffd"},
		{"ucs4-truncated", 4, append(u32(0x1f40d), 1, 2), "🐍\ufffd"},
		{"bad-kind", 3, []byte("abc"), ""},
		{"kind0", 0, []byte("abc"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecodeString(tt.kind, tt.data); got != tt.want {
				t.Errorf("DecodeString(%d, % x) = %q, want %q", tt.kind, tt.data, got, tt.want)
			}
		})
	}
}

// refLine is a direct transcription of the per-lookup walks in
// cpython-stacks.md §4.3–4.5 (and of CPython's PyCode_Addr2Line), with this
// package's fallback to firstLine and its rules for malformed 3.11+ tables.
// The fuzz target checks Table against it.
func refLine(minor int, b []byte, first int, pos int64) int {
	if pos < 0 || !Supported(minor) {
		return first
	}
	switch minor {
	case 8, 9:
		line, addr := first, int64(0)
		for i := 0; i+1 < len(b); i += 2 {
			addr += int64(b[i])
			if addr > pos {
				break
			}
			line += int(int8(b[i+1]))
		}
		return line
	case 10:
		if pos > math.MaxInt64/2 {
			return first
		}
		target := 2 * pos
		line, end := first, int64(0)
		for i := 0; i+1 < len(b); i += 2 {
			start := end
			end += int64(b[i])
			ld := int8(b[i+1])
			if ld != -128 {
				line += int(ld)
			}
			if start <= target && target < end {
				if ld == -128 {
					return first
				}
				return line
			}
		}
		return first
	}
	line, start := first, int64(0)
	for p := 0; p < len(b); {
		c := b[p]
		p++
		if c&0x80 == 0 {
			return first
		}
		code := int(c>>3) & 15
		length := int64(c&7) + 1
		switch {
		case code <= 9:
			p++
		case code <= 12:
			line += code - 10
			p += 2
		case code == 13 || code == 14:
			d, n, ok := readSvarint(b[p:])
			if !ok {
				return first
			}
			line += d
			p += n
			if code == 14 {
				for k := 0; k < 3 && p < len(b); k++ {
					p += skipVarint(b[p:])
				}
			}
		}
		if start <= pos && pos < start+length {
			if code == 15 {
				return first
			}
			return line
		}
		start += length
	}
	return first
}

func FuzzLine(f *testing.F) {
	f.Add(uint8(8), []byte{6, 1, 8, 2, 0, 0x80}, int32(10), int64(6))
	f.Add(uint8(10), []byte{4, 1, 2, 0x80, 2, 1, 0, 5}, int32(20), int64(3))
	f.Add(uint8(11), (&loc{}).long(-1, 1).oneLine(1, 3).short(8).none(2).noCols(300, 2).b, int32(7), int64(14))
	f.Add(uint8(13), []byte{0x80 | 13<<3, 0x7f, 0x7f, 0x41}, int32(1), int64(0))
	f.Fuzz(func(t *testing.T, minor uint8, table []byte, first int32, pos int64) {
		m := int(minor%8) + 7 // 7..14: both unsupported neighbours too
		tab := NewTable(m, table, int(first))
		// Probe pos and the boundaries around it so one input checks a few
		// range edges.
		for _, p := range []int64{pos, pos - 1, pos + 1, 0, -1, int64(len(table)) * 4} {
			got := tab.Line(p)
			if want := refLine(m, table, int(first), p); got != want {
				t.Fatalf("3.%d table % x first %d pos %d: Table.Line = %d, reference = %d",
					m, table, first, p, got, want)
			}
		}
		DecodeString(minor%6, table)
	})
}

// fiveHundred returns a 3.12-style location table for a 500-line function
// (first line 100): per line one ONE_LINE1 entry and two SHORT entries, as
// the compiler emits for `v = v + i`, with a LONG entry every 50 lines.
func fiveHundred() []byte {
	l := &loc{}
	l.none(1)
	for i := 0; i < 500; i++ {
		if i%50 == 49 {
			l.long(1, 2)
		} else {
			l.oneLine(1, 2)
		}
		l.short(4).short(1)
	}
	return l.b
}

// TestFiveHundred pins the benchmark table, so the benchmark measures a
// table that decodes as intended.
func TestFiveHundred(t *testing.T) {
	tab := NewTable(12, fiveHundred(), 100)
	for i := 0; i < 500; i++ {
		for u := 0; u < 7; u++ {
			pos := int64(1 + i*7 + u)
			if got, want := tab.Line(pos), 101+i; got != want {
				t.Fatalf("pos %d: line %d, want %d", pos, got, want)
			}
		}
	}
	if got := tab.Line(0); got != 100 {
		t.Errorf("NONE entry: line %d, want firstLine 100", got)
	}
}

// BenchmarkTable1M builds the Table of a 500-line function once per
// iteration and looks up 1M positions spread over the function.
func BenchmarkTable1M(b *testing.B) {
	raw := fiveHundred()
	n := int64(1 + 500*7)
	b.ReportAllocs()
	for b.Loop() {
		tab := NewTable(12, raw, 100)
		s := 0
		for i := int64(0); i < 1_000_000; i++ {
			s += tab.Line(i * 7919 % n)
		}
		if s == 0 {
			b.Fatal("no lines")
		}
	}
}

// BenchmarkNewTable measures decoding alone.
func BenchmarkNewTable(b *testing.B) {
	raw := fiveHundred()
	b.ReportAllocs()
	for b.Loop() {
		NewTable(12, raw, 100)
	}
}

// BenchmarkLookup measures one cached lookup.
func BenchmarkLookup(b *testing.B) {
	tab := NewTable(12, fiveHundred(), 100)
	n := int64(1 + 500*7)
	i := int64(0)
	for b.Loop() {
		tab.Line(i % n)
		i += 7919
	}
}

// BenchmarkWalk is the per-lookup walk that Table replaces, for comparison.
func BenchmarkWalk(b *testing.B) {
	raw := fiveHundred()
	n := int64(1 + 500*7)
	i := int64(0)
	for b.Loop() {
		refLine(12, raw, 100, i%n)
		i += 7919
	}
}
