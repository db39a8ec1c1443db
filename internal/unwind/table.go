// Package unwind compiles the call-frame information of an x86-64 ELF
// module (.eh_frame) into the unwind table format of
// docs/unwind-format.md: a sorted list of rows, each saying how to find the
// caller of a frame whose pc lies in it, which the preloaded library
// binary-searches instead of running libgcc's unwinder. It also reads such
// tables back (Parse, Lookup) and writes them into a run directory in the
// background (Publisher).
package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// The kinds of a row (bits 24–25 of a rule word).
const (
	KindRSP     = 0 // the CFA is rsp + offset
	KindRBP     = 1 // the CFA is rbp + offset
	KindUnknown = 2 // no rule the library follows: libgcc walks the stack
	KindEnd     = 3 // outermost frame: the return address is undefined
)

// The file layout (docs/unwind-format.md).
const (
	magic      = "HLUNWND1"
	version    = 2
	headerSize = 96
	maxRows    = 1 << 24
	maxIDLen   = 64
)

// Rule is one decoded row rule: how to find the caller of a frame whose pc
// lies in the row.
type Rule struct {
	Kind      uint8  // KindRSP, KindRBP, KindUnknown or KindEnd
	CFAOffset uint16 // added to rsp (KindRSP) or rbp (KindRBP) to give the CFA
	RBPSlot   uint8  // k: the caller's rbp (x29) is at CFA − 8k; 0: it is left as found
	RASlot    uint8  // arm64: the return address is at CFA − 8·RASlot (1–63), or 0: at CFA − 8·(RBPSlot − 1); x86-64: 0 (CFA − 8)
}

// maxRASlot is the largest RASlot (bits 26–31).
const maxRASlot = 63

// unknown is the encoded rule of kind 2, which carries no offset and no slot.
var unknown = Rule{Kind: KindUnknown}.Encode()

// Encode returns r as a rule word. A Kind above 3 spills into RASlot's
// bits: Kind must be one of the constants, RASlot at most 63.
func (r Rule) Encode() uint32 {
	return uint32(r.CFAOffset) | uint32(r.RBPSlot)<<16 | uint32(r.Kind)<<24 | uint32(r.RASlot)<<26
}

// DecodeRule splits a rule word into its fields; DecodeRule(r.Encode()) == r.
func DecodeRule(w uint32) Rule {
	return Rule{Kind: uint8(w >> 24 & 3), CFAOffset: uint16(w), RBPSlot: uint8(w >> 16), RASlot: uint8(w >> 26)}
}

// Table is a parsed, validated table file.
type Table struct {
	Base uint64   // link-time address of the first row; Addr is relative to it
	ID   []byte   // the module's GNU build ID
	Addr []uint32 // start of each row − Base, strictly increasing
	Rule []uint32 // encoded rule of each row; the last is of kind 2
}

// Parse validates b as a table file and returns it. It makes the checks the
// library makes before it maps a table (size, magic, version, row count,
// shift, build ID length) and those the library leaves to its lookups: the
// build ID's padding is zero, the first row at 0, addresses increasing,
// bits 26–31 clear, the final row of kind 2, the bucket index the one
// the agent writes. Hostile input never makes it panic, and it allocates
// no more than len(b).
func Parse(b []byte) (*Table, error) {
	if len(b) < headerSize {
		return nil, fmt.Errorf("unwind: table: %d bytes, shorter than the %d-byte header", len(b), headerSize)
	}
	le := binary.LittleEndian
	if string(b[:8]) != magic {
		return nil, fmt.Errorf("unwind: table: bad magic %q", b[:8])
	}
	if v := le.Uint32(b[8:]); v != version {
		return nil, fmt.Errorf("unwind: table: version %d, want %d", v, version)
	}
	rows := le.Uint32(b[12:])
	if rows == 0 || rows > maxRows {
		return nil, fmt.Errorf("unwind: table: %d rows, want 1 to %d", rows, maxRows)
	}
	if uint64(len(b)) < headerSize+8*uint64(rows) {
		return nil, fmt.Errorf("unwind: table: %d bytes, too short for %d rows", len(b), rows)
	}
	shift := le.Uint32(b[28:])
	if shift > 31 {
		return nil, fmt.Errorf("unwind: table: bucket shift %d, want at most 31", shift)
	}
	last := le.Uint32(b[headerSize+4*(rows-1):])
	if want := headerSize + 8*uint64(rows) + 4*buckets(last, shift); uint64(len(b)) != want {
		return nil, fmt.Errorf("unwind: table: %d bytes, want %d for %d rows and shift %d", len(b), want, rows, shift)
	}
	idLen := le.Uint32(b[24:])
	if idLen == 0 || idLen > maxIDLen {
		return nil, fmt.Errorf("unwind: table: build ID length %d, want 1 to %d", idLen, maxIDLen)
	}
	id := b[32 : 32+idLen]
	if pad := b[32+idLen : headerSize]; !allZero(pad) {
		return nil, errors.New("unwind: table: build ID padding is not zero")
	}
	t := &Table{
		Base: le.Uint64(b[16:]),
		ID:   bytes.Clone(id),
		Addr: make([]uint32, rows),
		Rule: make([]uint32, rows),
	}
	addr, rule := b[headerSize:], b[headerSize+4*int(rows):]
	if le.Uint32(addr) != 0 {
		return nil, fmt.Errorf("unwind: table: first row at %#x, want 0 (base is its address)", le.Uint32(addr))
	}
	for i := range t.Addr {
		t.Addr[i] = le.Uint32(addr[4*i:])
		t.Rule[i] = le.Uint32(rule[4*i:])
		if i > 0 && t.Addr[i] <= t.Addr[i-1] {
			return nil, fmt.Errorf("unwind: table: row %d at %#x does not follow row %d at %#x", i, t.Addr[i], i-1, t.Addr[i-1])
		}
		if r := DecodeRule(t.Rule[i]); r.RASlot != 0 && r.Kind >= KindUnknown {
			return nil, fmt.Errorf("unwind: table: row %d: rule %#x of kind %d has bits 26-31 set", i, t.Rule[i], r.Kind)
		}
	}
	if k := DecodeRule(t.Rule[rows-1]).Kind; k != KindUnknown {
		return nil, fmt.Errorf("unwind: table: last row is of kind %d, want %d", k, KindUnknown)
	}
	wantShift, first := t.index()
	if shift != wantShift {
		return nil, fmt.Errorf("unwind: table: bucket shift %d, want %d", shift, wantShift)
	}
	index := b[headerSize+8*int(rows):]
	for k, r := range first {
		if got := le.Uint32(index[4*k:]); got != r {
			return nil, fmt.Errorf("unwind: table: bucket %d starts at row %d, want %d", k, got, r)
		}
	}
	return t, nil
}

// buckets is the number of index entries of a table whose last row starts
// at last, split into buckets of 2^shift bytes: one per bucket and one that
// ends the final bucket's search.
func buckets(last, shift uint32) uint64 { return uint64(last>>shift) + 2 }

// index returns t's bucket index (docs/unwind-format.md): its address range
// split into about as many buckets as it has rows, a power of two bytes
// each, and the row each bucket starts in, so that a lookup searches the
// few rows of one bucket.
func (t *Table) index() (shift uint32, first []uint32) {
	rows := uint32(len(t.Addr))
	span := t.Addr[rows-1]
	shift = 4
	for shift < 31 && span>>shift > rows {
		shift++
	}
	first = make([]uint32, buckets(span, shift))
	r := uint32(0)
	for k := range first {
		start := uint64(k) << shift
		for r+1 < rows && uint64(t.Addr[r+1]) <= start {
			r++
		}
		first[k] = r
	}
	return shift, first
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Lookup returns the rule of the row holding the link-time address vaddr
// (not adjusted by a load bias). ok is false outside all rows: before the
// first, or at or after the start of the last, which covers nothing.
func (t *Table) Lookup(vaddr uint64) (r Rule, ok bool) {
	n := len(t.Addr)
	// Modulo 2^64, as the library computes it: an address below Base
	// wraps to one far above the last row.
	d := vaddr - t.Base
	if n == 0 || d >= uint64(t.Addr[n-1]) {
		return Rule{}, false
	}
	a := uint32(d) // below Addr[n-1], so it fits
	// The last row starting at or below a; Addr[0] is 0.
	i := sort.Search(n, func(i int) bool { return t.Addr[i] > a }) - 1
	return DecodeRule(t.Rule[i]), true
}

// bytes returns t as a table file. t must hold at most maxRows rows and an
// ID of at most maxIDLen bytes.
func (t *Table) bytes() []byte {
	rows := len(t.Addr)
	shift, first := t.index()
	b := make([]byte, headerSize+8*rows+4*len(first))
	le := binary.LittleEndian
	copy(b, magic)
	le.PutUint32(b[8:], version)
	le.PutUint32(b[12:], uint32(rows))
	le.PutUint64(b[16:], t.Base)
	le.PutUint32(b[24:], uint32(len(t.ID)))
	le.PutUint32(b[28:], shift)
	copy(b[32:headerSize], t.ID)
	addr, rule, index := b[headerSize:], b[headerSize+4*rows:], b[headerSize+8*rows:]
	for i := range t.Addr {
		le.PutUint32(addr[4*i:], t.Addr[i])
		le.PutUint32(rule[4*i:], t.Rule[i])
	}
	for k, r := range first {
		le.PutUint32(index[4*k:], r)
	}
	return b
}
