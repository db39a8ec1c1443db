package unwind

import (
	"encoding/binary"
	"testing"
)

// Where the hand-assembled sections of these tests are.
const (
	testEHAddr  = 0x200000
	testHdrAddr = 0x1f0000
)

var testID = []byte{1, 2, 3, 4, 5, 6, 7, 8}

// eh assembles an .eh_frame section at testEHAddr.
type eh struct{ b []byte }

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// entry appends an entry with a 32-bit length; body follows the CIE
// pointer field, which id(fieldOffset) computes.
func (e *eh) entry(id func(field int) uint32, body func(bodyOff int) []byte) int {
	off := len(e.b)
	e.b = append(e.b, 0, 0, 0, 0)
	e.b = binary.LittleEndian.AppendUint32(e.b, id(off+4))
	e.b = append(e.b, body(len(e.b))...)
	binary.LittleEndian.PutUint32(e.b[off:], uint32(len(e.b)-off-4))
	return off
}

// rawCIE appends a CIE whose body (after the CIE id) is body.
func (e *eh) rawCIE(body []byte) int {
	return e.entry(func(int) uint32 { return 0 }, func(int) []byte { return body })
}

// cie appends the x86-64 ABI's CIE ("zR", pcrel|sdata4 FDE pointers, code
// alignment 1, data alignment −8, CFA rsp+8, return address at CFA−8),
// augmented by aug (letters after R, and their data), then extra
// instructions.
func (e *eh) cie(augLetters string, augData []byte, extra ...byte) int {
	return e.rawCIE(cat([]byte{1}, []byte("zR"+augLetters+"\x00"), uleb(1), sleb(-8), []byte{16},
		uleb(uint64(1+len(augData))), []byte{0x1b}, augData,
		[]byte{0x0c, 7, 8, 0x90, 1}, extra))
}

// fde appends an FDE of the CIE at cie (one made by e.cie) for
// [begin, begin+size) with the instructions insns.
func (e *eh) fde(cie int, begin uint64, size uint32, insns ...byte) int {
	return e.fdeAug(cie, begin, size, nil, insns...)
}

func (e *eh) fdeAug(cie int, begin uint64, size uint32, aug []byte, insns ...byte) int {
	return e.entry(func(field int) uint32 { return uint32(field - cie) }, func(at int) []byte {
		pc := uint32(begin - (testEHAddr + uint64(at)))
		b := binary.LittleEndian.AppendUint32(nil, pc)
		b = binary.LittleEndian.AppendUint32(b, size)
		b = append(b, uleb(uint64(len(aug)))...)
		b = append(b, aug...)
		return append(b, insns...)
	})
}

// setLoc is DW_CFA_set_loc to addr, for an FDE instruction at section
// offset at (pcrel|sdata4, the operand one byte after the opcode).
func setLoc(at int, addr uint64) []byte {
	return binary.LittleEndian.AppendUint32([]byte{0x01}, uint32(addr-(testEHAddr+uint64(at)+1)))
}

// Rules as the tests name them.
func rsp(off uint16, k uint8) Rule { return Rule{Kind: KindRSP, CFAOffset: off, RBPSlot: k} }
func rbp(off uint16, k uint8) Rule { return Rule{Kind: KindRBP, CFAOffset: off, RBPSlot: k} }

var (
	unk     = Rule{Kind: KindUnknown}
	end     = Rule{Kind: KindEnd}
	none    = Rule{Kind: 0xff} // Lookup's ok is false
	abiRule = rsp(8, 0)        // the ABI CIE's rule
)

type probe struct {
	addr uint64
	want Rule
}

// cfiCase is an .eh_frame section and what the table must say of it.
type cfiCase struct {
	name   string
	build  func(e *eh)
	probes []probe
	rows   int // if not 0, the number of rows the table must have
}

// Advances, for readability: DW_CFA_advance_loc by n (n < 64).
func adv(n byte) byte { return 0x40 | n }

var cfiCases = []cfiCase{
	{"the CIE's rule", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100)
	}, []probe{{0xfff, none}, {0x1000, abiRule}, {0x10ff, abiRule}, {0x1100, none}}, 2},
	{"a frame pointer", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100,
			adv(1), 0x0e, 16, 0x86, 2, adv(3), 0x0d, 6, adv(0x20), 0x0c, 7, 8)
	}, []probe{{0x1000, abiRule}, {0x1001, rsp(16, 2)}, {0x1003, rsp(16, 2)}, {0x1004, rbp(16, 2)},
		{0x1023, rbp(16, 2)}, {0x1024, rsp(8, 2)}, {0x10ff, rsp(8, 2)}, {0x1100, none}}, 5},
	{"an advance of 0: the later row wins", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100, adv(4), 0x0e, 16, adv(0), 0x0e, 24)
	}, []probe{{0x1003, abiRule}, {0x1004, rsp(24, 0)}, {0x10ff, rsp(24, 0)}}, 3},
	{"advance_loc1/2/4 and code alignment", func(e *eh) {
		ci := e.rawCIE(cat([]byte{1}, []byte("zR\x00"), uleb(4), sleb(-8), []byte{16}, uleb(1), []byte{0x1b},
			[]byte{0x0c, 7, 8, 0x90, 1}))
		e.fde(ci, 0x1000, 0x2000, adv(1), 0x0e, 16, 0x02, 2, 0x0e, 24, 0x03, 0x00, 0x01, 0x0e, 32, 0x04, 1, 0, 0, 0, 0x0e, 40)
	}, []probe{{0x1003, abiRule}, {0x1004, rsp(16, 0)}, {0x100b, rsp(16, 0)}, {0x100c, rsp(24, 0)},
		{0x140b, rsp(24, 0)}, {0x140c, rsp(32, 0)}, {0x1410, rsp(40, 0)}, {0x2fff, rsp(40, 0)}}, 0},
	{"set_loc", func(e *eh) {
		ci := e.cie("", nil)
		// The FDE's instructions start 4+4+4+4+1 bytes into it.
		at := len(e.b) + 17
		e.fde(ci, 0x1000, 0x100, cat(setLoc(at, 0x1010), []byte{0x0e, 16})...)
	}, []probe{{0x100f, abiRule}, {0x1010, rsp(16, 0)}}, 0},
	{"set_loc backwards: unknown from there", func(e *eh) {
		ci := e.cie("", nil)
		at := len(e.b) + 20
		e.fde(ci, 0x1000, 0x100, cat([]byte{adv(8), 0x0e, 16}, setLoc(at, 0x1004), []byte{0x0e, 24})...)
	}, []probe{{0x1007, abiRule}, {0x1008, unk}, {0x10ff, unk}}, 0},
	{"rows past the FDE's end are not its", func(e *eh) {
		ci := e.cie("", nil)
		e.fde(ci, 0x1000, 0x10, adv(0x20), 0x0e, 16)
		e.fde(ci, 0x1020, 0x10)
	}, []probe{{0x100f, abiRule}, {0x1010, unk}, {0x101f, unk}, {0x1020, abiRule}}, 0},
	{"remember and restore state, the CFA too", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100,
			adv(1), 0x0e, 16, 0x0a, adv(1), 0x0e, 32, 0x86, 2, adv(1), 0x0b, adv(1), 0x0e, 8)
	}, []probe{{0x1001, rsp(16, 0)}, {0x1002, rsp(32, 2)}, {0x1003, rsp(16, 0)}, {0x1004, abiRule}}, 0},
	{"64 remembered states", func(e *eh) {
		insns := []byte{adv(1)}
		for range 64 {
			insns = append(insns, 0x0a)
		}
		e.fde(e.cie("", nil), 0x1000, 0x100, append(insns, 0x0e, 16)...)
	}, []probe{{0x1000, abiRule}, {0x1001, rsp(16, 0)}}, 0},
	{"65 remembered states: unknown", func(e *eh) {
		insns := []byte{adv(1)}
		for range 65 {
			insns = append(insns, 0x0a)
		}
		e.fde(e.cie("", nil), 0x1000, 0x100, append(insns, 0x0e, 16)...)
	}, []probe{{0x1000, abiRule}, {0x1001, unk}, {0x10ff, unk}}, 0},
	{"restore_state with nothing remembered", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100, adv(2), 0x0b, adv(2), 0x0e, 16)
	}, []probe{{0x1001, abiRule}, {0x1002, unk}, {0x1004, unk}}, 0},
	{"an opcode it does not know", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100, adv(2), 0x0e, 16, adv(2), 0x2d, adv(2), 0x0e, 8)
	}, []probe{{0x1002, rsp(16, 0)}, {0x1004, unk}, {0x1006, unk}, {0x10ff, unk}}, 0},
	{"a truncated instruction", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100, adv(2), 0x0e, 16, adv(2), 0x0c, 7)
	}, []probe{{0x1002, rsp(16, 0)}, {0x1004, unk}}, 0},
	{"restore and restore_extended: the CIE's rules", func(e *eh) {
		// The CIE saves rbp at CFA−16; the FDE moves it, loses the return
		// address, and restores both.
		e.fde(e.cie("", nil, 0x86, 2), 0x1000, 0x100,
			adv(1), 0x86, 3, adv(1), 0xc6, adv(1), 0x07, 16, adv(1), 0x06, 16)
	}, []probe{{0x1000, rsp(8, 2)}, {0x1001, rsp(8, 3)}, {0x1002, rsp(8, 2)}, {0x1003, end}, {0x1004, rsp(8, 2)}}, 0},
	{"CFA rules", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100,
			adv(1), 0x0f, 2, 0x77, 0x08, // def_cfa_expression
			adv(1), 0x0e, 24, // still an expression
			adv(1), 0x0d, 7, // def_cfa_register: rsp+24
			adv(1), 0x0c, 10, 8, // r10+8
			adv(1), 0x12, 7, 0x7e, // def_cfa_sf rsp, −2×−8
			adv(1), 0x13, 0x7d, // def_cfa_offset_sf −3×−8
			adv(1), 0x0e, 0xff, 0xff, 0x03, // 65535
			adv(1), 0x0e, 0x80, 0x80, 0x04, // 65536
			adv(1), 0x13, 0x01, // −8
			adv(1), 0x0c, 6, 0)
	}, []probe{{0x1001, unk}, {0x1002, unk}, {0x1003, rsp(24, 0)}, {0x1004, unk}, {0x1005, rsp(16, 0)},
		{0x1006, rsp(24, 0)}, {0x1007, rsp(65535, 0)}, {0x1008, unk}, {0x1009, unk}, {0x100a, rbp(0, 0)}}, 0},
	{"rbp rules", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100,
			adv(1), 0x86, 0xff, 0x01, // c−2040: k=255
			adv(1), 0x86, 0x80, 0x02, // c−2048
			adv(1), 0x08, 6, // same_value
			adv(1), 0x11, 6, 0x01, // offset_extended_sf: 1×−8
			adv(1), 0x07, 6, // undefined
			adv(1), 0x05, 6, 3, // offset_extended: c−24
			adv(1), 0x09, 6, 3, // in rbx
			adv(1), 0x05, 6, 1, // c−8
			adv(1), 0x10, 6, 2, 0x77, 0x08, // expression
			adv(1), 0x86, 2, // c−16
			adv(1), 0x14, 6, 2, // val_offset
			adv(1), 0x86, 2,
			adv(1), 0x15, 6, 0x7e, // val_offset_sf
			adv(1), 0x86, 2,
			adv(1), 0x16, 6, 1, 0x9c, // val_expression
			adv(1), 0x86, 2,
			adv(1), 0x2f, 6, 2, // negative_offset_extended: c+16
			adv(1), 0x2f, 6, 0x7e, // c+126×8
			adv(1), 0x11, 6, 0x01, // c−8 again
		)
	}, []probe{{0x1001, rsp(8, 255)}, {0x1002, unk}, {0x1003, abiRule}, {0x1004, rsp(8, 1)}, {0x1005, unk},
		{0x1006, rsp(8, 3)}, {0x1007, unk}, {0x1008, rsp(8, 1)}, {0x1009, unk}, {0x100a, rsp(8, 2)},
		{0x100b, unk}, {0x100c, rsp(8, 2)}, {0x100d, unk}, {0x100e, rsp(8, 2)}, {0x100f, unk},
		{0x1010, rsp(8, 2)}, {0x1011, unk}, {0x1012, unk}, {0x1013, rsp(8, 1)}}, 0},
	{"return address rules", func(e *eh) {
		e.fde(e.cie("", nil), 0x1000, 0x100,
			adv(1), 0x86, 2, 0x0e, 16, 0x07, 16, // undefined: the end, whatever rbp says
			adv(1), 0x90, 2, // c−16
			adv(1), 0x90, 1, // c−8
			adv(1), 0x09, 16, 0, // in rax
			adv(1), 0x90, 1, 0x2e, 0x20, // args_size, no matter
			adv(1), 0x08, 16) // same_value
	}, []probe{{0x1001, end}, {0x1002, unk}, {0x1003, rsp(16, 2)}, {0x1004, unk}, {0x1005, rsp(16, 2)}, {0x1006, unk}}, 0},
	{"a signal frame is libgcc's", func(e *eh) {
		e.fde(e.cie("S", nil), 0x1000, 0x100, adv(1), 0x0e, 16)
	}, []probe{{0x1000, unk}, {0x1001, unk}, {0x1100, none}}, 2},
	{"a personality, an LSDA and FDE augmentation data", func(e *eh) {
		ci := e.rawCIE(cat([]byte{1}, []byte("zPLR\x00"), uleb(1), sleb(-8), []byte{16},
			uleb(7), []byte{0x9b, 0, 0, 0, 0, 0x1b, 0x1b}, []byte{0x0c, 7, 8, 0x90, 1}))
		e.fdeAug(ci, 0x1000, 0x100, []byte{0, 0, 0, 0}, adv(1), 0x0e, 16)
	}, []probe{{0x1000, abiRule}, {0x1001, rsp(16, 0)}}, 0},
	{"CIE versions 3 and 4", func(e *eh) {
		v3 := e.rawCIE(cat([]byte{3}, []byte("zR\x00"), uleb(1), sleb(-8), uleb(16), uleb(1), []byte{0x1b}, []byte{0x0c, 7, 8, 0x90, 1}))
		v4 := e.rawCIE(cat([]byte{4}, []byte("zR\x00"), []byte{8, 0}, uleb(1), sleb(-8), uleb(16), uleb(1), []byte{0x1b}, []byte{0x0c, 7, 16, 0x90, 1}))
		e.fde(v3, 0x1000, 0x10)
		e.fde(v4, 0x1010, 0x10)
	}, []probe{{0x1000, abiRule}, {0x1010, rsp(16, 0)}}, 0},
	{"a CIE without augmentation: absolute pointers", func(e *eh) {
		ci := e.rawCIE(cat([]byte{1, 0}, uleb(1), sleb(-8), []byte{16, 0x0c, 7, 8, 0x90, 1}))
		e.entry(func(field int) uint32 { return uint32(field - ci) }, func(int) []byte {
			return cat(binary.LittleEndian.AppendUint64(nil, 0x1000), binary.LittleEndian.AppendUint64(nil, 0x10), []byte{adv(1), 0x0e, 16})
		})
	}, []probe{{0x1000, abiRule}, {0x1001, rsp(16, 0)}, {0x1010, none}}, 0},
	{"udata8 and datarel pointers", func(e *eh) {
		abs := e.rawCIE(cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{0x04}, []byte{0x0c, 7, 8, 0x90, 1}))
		rel := e.rawCIE(cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{0x3b}, []byte{0x0c, 7, 16, 0x90, 1}))
		e.entry(func(field int) uint32 { return uint32(field - abs) }, func(int) []byte {
			return cat(binary.LittleEndian.AppendUint64(nil, 0x1000), binary.LittleEndian.AppendUint64(nil, 0x10), []byte{0})
		})
		begin := uint64(0x1010)
		e.entry(func(field int) uint32 { return uint32(field - rel) }, func(int) []byte {
			return cat(binary.LittleEndian.AppendUint32(nil, uint32(begin-testHdrAddr)), binary.LittleEndian.AppendUint32(nil, 0x10), []byte{0})
		})
	}, []probe{{0x1000, abiRule}, {0x1010, rsp(16, 0)}, {0x1020, none}}, 0},
	{"a 64-bit length", func(e *eh) {
		ci := e.cie("", nil)
		off := len(e.b)
		e.b = append(e.b, 0xff, 0xff, 0xff, 0xff)
		e.b = binary.LittleEndian.AppendUint64(e.b, 8+4+4+1+3)
		e.b = binary.LittleEndian.AppendUint64(e.b, uint64(off+12-ci))
		e.b = binary.LittleEndian.AppendUint32(e.b, uint32(0x1000-(testEHAddr+len(e.b))))
		e.b = binary.LittleEndian.AppendUint32(e.b, 0x10)
		e.b = append(e.b, 0, adv(1), 0x0e, 16)
	}, []probe{{0x1000, abiRule}, {0x1001, rsp(16, 0)}, {0x1010, none}}, 0},
	{"FDEs: sorted, gaps, touching, merged, overlapping, empty, at 0", func(e *eh) {
		ci := e.cie("", nil)
		e.fde(ci, 0x3000, 0x100, adv(1), 0x0e, 16)
		e.fde(ci, 0x1000, 0x100)
		e.fde(ci, 0x1100, 0x100) // touches: one row with the one before
		e.fde(ci, 0x1180, 0x100, 0x0e, 32)
		e.fde(ci, 0x2000, 0)
		e.fde(ci, 0, 0x100)
	}, []probe{{0x0, none}, {0x1000, abiRule}, {0x11ff, abiRule}, {0x1200, unk}, {0x2fff, unk},
		{0x3000, abiRule}, {0x3001, rsp(16, 0)}, {0x3100, none}}, 5},
	{"a CIE it cannot read: its FDEs are left out", func(e *eh) {
		bad := e.rawCIE(cat([]byte{2}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{0x1b}))
		aug := e.rawCIE(cat([]byte{1}, []byte("eh\x00"), uleb(1), sleb(-8), []byte{16}))
		good := e.cie("", nil)
		e.fde(bad, 0x1000, 0x100)
		e.fde(aug, 0x1100, 0x100)
		e.fde(good, 0x2000, 0x100)
	}, []probe{{0x1000, none}, {0x1100, none}, {0x2000, abiRule}}, 2},
	{"CIE instructions it cannot follow: the FDE is unknown", func(e *eh) {
		e.fde(e.cie("", nil, adv(1)), 0x1000, 0x100, 0x0e, 16)
		e.fde(e.cie("", nil, 0x2d), 0x1100, 0x100, 0x0e, 16)
	}, []probe{{0x1000, unk}, {0x1100, unk}, {0x11ff, unk}}, 2},
	{"FDE augmentation past its end: unknown", func(e *eh) {
		ci := e.cie("", nil)
		e.entry(func(field int) uint32 { return uint32(field - ci) }, func(at int) []byte {
			pc := binary.LittleEndian.AppendUint32(nil, uint32(0x1000-(testEHAddr+at)))
			return cat(pc, binary.LittleEndian.AppendUint32(nil, 0x100), []byte{0x7f})
		})
	}, []probe{{0x1000, unk}, {0x10ff, unk}, {0x1100, none}}, 2},
	{"the terminator ends the section", func(e *eh) {
		ci := e.cie("", nil)
		e.fde(ci, 0x1000, 0x100)
		e.b = append(e.b, 0, 0, 0, 0)
		e.fde(ci, 0x2000, 0x100)
	}, []probe{{0x1000, abiRule}, {0x2000, none}}, 2},
	{"a length past the end stops parsing there", func(e *eh) {
		ci := e.cie("", nil)
		e.fde(ci, 0x1000, 0x100)
		e.fde(ci, 0x2000, 0x100)
		e.b = append(e.b, 0x40, 0, 0, 0, 0, 0, 0, 0)
	}, []probe{{0x1000, abiRule}, {0x1100, unk}, {0x2000, abiRule}}, 0},
	{"nothing but a CIE", func(e *eh) {
		e.cie("", nil)
	}, []probe{{0, none}, {0x1000, none}}, 1},
}

// compileSection compiles an .eh_frame section at testEHAddr in a test ELF.
func compileSection(t testing.TB, section []byte) (*compiled, *Table) {
	t.Helper()
	c, err := compile(openTestELF(t, testELF(section, testEHAddr, testID, testHdrAddr)))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Parse(c.table.bytes())
	if err != nil {
		t.Fatalf("Parse of the table Build wrote: %v", err)
	}
	return c, tab
}

// Hand-assembled CFI, and the rules docs/unwind-format.md gives it.
func TestCFI(t *testing.T) {
	for _, tc := range cfiCases {
		t.Run(tc.name, func(t *testing.T) {
			var e eh
			tc.build(&e)
			_, tab := compileSection(t, e.b)
			for _, p := range tc.probes {
				got, ok := tab.Lookup(p.addr)
				if p.want == none && ok || p.want != none && (!ok || got != p.want) {
					t.Errorf("at %#x: got %v (ok=%v), want %v", p.addr, got, ok, p.want)
				}
			}
			if tc.rows != 0 && len(tab.Addr) != tc.rows {
				t.Errorf("%d rows, want %d: %#x %#x", len(tab.Addr), tc.rows, tab.Addr, tab.Rule)
			}
		})
	}
}

// An FDE that overlaps the one before is left out, and compile says so.
func TestOverlapSkipped(t *testing.T) {
	var e eh
	ci := e.cie("", nil)
	e.fde(ci, 0x1000, 0x100)
	over := e.fde(ci, 0x1080, 0x100, 0x0e, 16)
	e.fde(ci, 0x1100, 0x100)
	c, tab := compileSection(t, e.b)
	if c.skipped[over] == "" {
		t.Errorf("skipped = %v, want the FDE at %#x", c.skipped, over)
	}
	for _, a := range []uint64{0x1080, 0x1100, 0x11ff} {
		if got, ok := tab.Lookup(a); !ok || got != abiRule {
			t.Errorf("at %#x: %v (ok=%v), want %v", a, got, ok, abiRule)
		}
	}
}

// A span of more than 4 GiB cannot be written.
func TestSpanTooLarge(t *testing.T) {
	var e eh
	ci := e.rawCIE(cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{0x04}, []byte{0x0c, 7, 8, 0x90, 1}))
	for _, begin := range []uint64{0x1000, 0x1_0000_1000} {
		e.entry(func(field int) uint32 { return uint32(field - ci) }, func(int) []byte {
			return cat(binary.LittleEndian.AppendUint64(nil, begin), binary.LittleEndian.AppendUint64(nil, 0x10), []byte{0})
		})
	}
	if b, err := Build(openTestELF(t, testELF(e.b, testEHAddr, testID, 0))); err == nil {
		t.Errorf("Build gave %d bytes, want an error", len(b))
	}
}
