package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"
)

// Rule words, bit by bit as docs/unwind-format.md lays them out.
func TestRuleEncoding(t *testing.T) {
	for _, tc := range []struct {
		r Rule
		w uint32
	}{
		{Rule{Kind: KindRSP, CFAOffset: 8}, 0x00000008},
		{Rule{Kind: KindRSP, CFAOffset: 16, RBPSlot: 2}, 0x00020010},
		{Rule{Kind: KindRBP, CFAOffset: 16, RBPSlot: 2}, 0x01020010},
		{Rule{Kind: KindRBP, CFAOffset: 0xffff, RBPSlot: 0xff}, 0x01ffffff},
		{Rule{Kind: KindUnknown}, 0x02000000},
		{Rule{Kind: KindEnd}, 0x03000000},
	} {
		if w := tc.r.Encode(); w != tc.w {
			t.Errorf("%+v.Encode() = %#08x, want %#08x", tc.r, w, tc.w)
		}
		if r := DecodeRule(tc.w); r != tc.r {
			t.Errorf("DecodeRule(%#08x) = %+v, want %+v", tc.w, r, tc.r)
		}
	}
}

// libcTable builds libc's table with BuildFile.
func libcTable(t testing.TB) (b, id []byte) {
	t.Helper()
	b, id, err := BuildFile(oracleFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	return b, id
}

// A real table read back: the same bytes, the same build ID, and Lookup
// gives each row's rule from its first to its last byte, none outside.
func TestParseRoundTrip(t *testing.T) {
	b, id := libcTable(t)
	f, err := elf.Open(oracleFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fid, err := BuildID(f); err != nil || !bytes.Equal(fid, id) {
		t.Errorf("BuildID = %x, %v; BuildFile said %x", fid, err, id)
	}
	tab, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tab.ID, id) || !bytes.Equal(tab.bytes(), b) {
		t.Fatalf("the table does not survive Parse: ID %x (want %x)", tab.ID, id)
	}
	le := binary.LittleEndian
	rows := int(le.Uint32(b[12:]))
	base := le.Uint64(b[16:])
	rule := func(i int) Rule { return DecodeRule(le.Uint32(b[headerSize+4*rows+4*i:])) }
	addr := func(i int) uint64 { return base + uint64(le.Uint32(b[headerSize+4*i:])) }
	for i := range rows - 1 {
		for _, a := range []uint64{addr(i), addr(i+1) - 1} {
			if got, ok := tab.Lookup(a); !ok || got != rule(i) {
				t.Fatalf("Lookup(%#x) = %v, %v; row %d says %v", a, got, ok, i, rule(i))
			}
		}
	}
	for _, a := range []uint64{0, base - 1, addr(rows - 1), addr(rows-1) + 1, ^uint64(0)} {
		if got, ok := tab.Lookup(a); ok {
			t.Errorf("Lookup(%#x) = %v outside the rows", a, got)
		}
	}
	t.Logf("libc: %d rows, base %#x, %d bytes", rows, base, len(b))
}

// Each field broken in turn: Parse must refuse them all.
func TestParseRejects(t *testing.T) {
	good, _ := libcTable(t)
	le := binary.LittleEndian
	rows := int(le.Uint32(good[12:]))
	addr := func(b []byte, i int) []byte { return b[headerSize+4*i:] }
	rule := func(b []byte, i int) []byte { return b[headerSize+4*rows+4*i:] }
	index := func(b []byte, k int) []byte { return b[headerSize+8*rows+4*k:] }
	for _, tc := range []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"header only", func(b []byte) []byte { return b[:headerSize] }},
		{"short header", func(b []byte) []byte { return b[:headerSize-1] }},
		{"one byte short", func(b []byte) []byte { return b[:len(b)-1] }},
		{"one byte long", func(b []byte) []byte { return append(b, 0) }},
		{"magic", func(b []byte) []byte { b[7] = '2'; return b }},
		{"version 0", func(b []byte) []byte { le.PutUint32(b[8:], 0); return b }},
		{"version 1", func(b []byte) []byte { le.PutUint32(b[8:], 1); return b }},
		{"version 3", func(b []byte) []byte { le.PutUint32(b[8:], 3); return b }},
		{"no rows", func(b []byte) []byte { le.PutUint32(b[12:], 0); return b[:headerSize] }},
		{"rows one more", func(b []byte) []byte { le.PutUint32(b[12:], uint32(rows+1)); return b }},
		{"rows one less", func(b []byte) []byte { le.PutUint32(b[12:], uint32(rows-1)); return b }},
		{"rows 2^24+1", func(b []byte) []byte { le.PutUint32(b[12:], 1<<24+1); return b }},
		{"rows 2^32-1", func(b []byte) []byte { le.PutUint32(b[12:], ^uint32(0)); return b }},
		{"id_len 0", func(b []byte) []byte { le.PutUint32(b[24:], 0); return b }},
		{"id_len 65", func(b []byte) []byte { le.PutUint32(b[24:], 65); return b }},
		{"id_len 2^32-1", func(b []byte) []byte { le.PutUint32(b[24:], ^uint32(0)); return b }},
		{"shift one more", func(b []byte) []byte { b[28]++; return b }},
		{"shift one less", func(b []byte) []byte { b[28]--; return b }},
		{"shift 32", func(b []byte) []byte { le.PutUint32(b[28:], 32); return b }},
		{"index entry one more", func(b []byte) []byte { index(b, 7)[0]++; return b }},
		{"index entry past the rows", func(b []byte) []byte { le.PutUint32(index(b, 0), uint32(rows)); return b }},
		{"index without its last entry", func(b []byte) []byte { return b[:len(b)-4] }},
		{"build ID padding", func(b []byte) []byte { b[95] = 1; return b }},
		{"first row above 0", func(b []byte) []byte { le.PutUint32(addr(b, 0), 1); return b }},
		{"addresses equal", func(b []byte) []byte { copy(addr(b, 5), addr(b, 4)[:4]); return b }},
		{"addresses decreasing", func(b []byte) []byte { le.PutUint32(addr(b, rows-1), 1); return b }},
		{"rule bit 26 in a row of kind 2", func(b []byte) []byte { rule(b, rows-1)[3] |= 1 << 2; return b }},
		{"rule bit 31", func(b []byte) []byte { rule(b, rows-1)[3] |= 0x80; return b }},
		{"last row of kind 0", func(b []byte) []byte { le.PutUint32(rule(b, rows-1), 8); return b }},
		{"last row of kind 3", func(b []byte) []byte { le.PutUint32(rule(b, rows-1), 3<<24); return b }},
	} {
		b := tc.corrupt(bytes.Clone(good))
		if tab, err := Parse(b); err == nil {
			t.Errorf("%s: Parse accepted it (%d rows)", tc.name, len(tab.Addr))
		}
	}
	if _, err := Parse(good); err != nil {
		t.Errorf("the unbroken table: %v", err)
	}
}
