package unwind

import (
	"debug/elf"
	"errors"
)

// arch is what the rows of one architecture describe: the DWARF numbers of
// the stack pointer, the frame pointer and the return address column, and
// where the return address may be saved.
type arch struct {
	sp, fp, ra uint64
	// raSlots: arm64's return address (x30) may be saved in any of the
	// 63 slots below the CFA (bits 26–31 name it) or, farther down, just
	// above the saved x29 (0); x86-64's is at CFA − 8 by the call
	// instruction, and bits 26–31 stay 0.
	raSlots bool
}

var (
	archAMD64 = arch{sp: 7, fp: 6, ra: 16}
	archARM64 = arch{sp: 31, fp: 29, ra: 30, raSlots: true}
)

// archOf returns the rows' architecture for an ELF machine.
func archOf(m elf.Machine) (*arch, bool) {
	switch m {
	case elf.EM_X86_64:
		return &archAMD64, true
	case elf.EM_AARCH64:
		return &archARM64, true
	}
	return nil, false
}

// How a register is recovered (only the frame pointer's and the return
// address's matter: the library restores no other register).
const (
	ruleSame      = iota // the caller's value is this frame's (also: never said)
	ruleUndefined        // the caller's value is lost
	ruleOffset           // saved at CFA + off
	ruleOther            // in another register, by an expression, or val_*
)

type regRule struct {
	how uint8
	off int64
}

// frameState is the state of the CFA program at one location.
type frameState struct {
	cfaReg  uint64
	cfaOff  int64
	cfaExpr bool    // the CFA is given by an expression
	rbp, ra regRule // rbp: the frame pointer (x29 on arm64)
}

// maxStack bounds DW_CFA_remember_state: a deeper program is unknown.
const maxStack = 64

// rule encodes s as a row of the table (docs/unwind-format.md, Rules).
func (s *frameState) rule(a *arch) uint32 {
	if s.ra.how == ruleUndefined {
		return Rule{Kind: KindEnd}.Encode()
	}
	if s.ra.how != ruleOffset || s.cfaExpr || s.cfaOff < 0 || s.cfaOff > 0xffff {
		return unknown
	}
	r := Rule{CFAOffset: uint16(s.cfaOff)}
	switch {
	case !a.raSlots && s.ra.off == -8:
	case a.raSlots && s.ra.off < 0 && s.ra.off%8 == 0 && s.ra.off >= -8*maxRASlot:
		r.RASlot = uint8(-s.ra.off / 8)
	case a.raSlots && s.rbp.how == ruleOffset && s.ra.off == s.rbp.off+8:
		// RASlot 0: farther down, in the frame record's pair, just above
		// the saved x29 (whose slot is checked below).
	default:
		return unknown
	}
	switch s.cfaReg {
	case a.sp:
		r.Kind = KindRSP
	case a.fp:
		r.Kind = KindRBP
	default:
		return unknown
	}
	switch s.rbp.how {
	case ruleSame:
	case ruleOffset:
		if s.rbp.off >= 0 || s.rbp.off%8 != 0 || s.rbp.off < -8*255 {
			return unknown
		}
		r.RBPSlot = uint8(-s.rbp.off / 8)
	default:
		return unknown
	}
	return r.Encode()
}

// machine runs the CFA program of one FDE (its CIE's initial instructions,
// then its own), calling emit for the row that starts at each location.
type machine struct {
	arch  *arch
	ci    *cie
	init  frameState // after the CIE's initial instructions: DW_CFA_restore's rules
	s     frameState
	stack []frameState
	loc   uint64 // the current row starts here
	end   uint64 // the FDE's end: rows from here on are not the FDE's
	emit  func(addr uint64, rule uint32)
}

var (
	errOpcode = errors.New("unsupported CFA instruction")
	errCFA    = errors.New("malformed CFA instruction")
)

// runFDE emits the rows of f. A program it cannot follow makes the rest of
// f unknown, from the location where it went wrong.
func runFDE(a *arch, f *fde, emit func(addr uint64, rule uint32)) {
	m := machine{arch: a, ci: f.cie, loc: f.begin, end: f.end, emit: emit}
	if f.bad || f.cie.signal || f.cie.raReg != a.ra {
		// A signal frame's pc is not a return address, which the library
		// assumes of every caller's: signal frames are libgcc's. A CIE
		// whose return address column is not the ABI's (16; 30) is not followed.
		emit(f.begin, unknown)
		return
	}
	ci := f.cie.insns
	if m.run(&ci, true) != nil {
		emit(f.begin, unknown)
		return
	}
	m.init = m.s
	fi := f.insns
	if err := m.run(&fi, false); err != nil {
		if m.loc < m.end {
			m.emit(m.loc, unknown)
		}
		return
	}
	if m.loc < m.end {
		m.emit(m.loc, m.s.rule(m.arch))
	}
}

// run executes the instructions c holds. In a CIE's (cie), an instruction
// that moves the location is an error.
func (m *machine) run(c *cursor, cie bool) error {
	for c.pos < c.end && m.loc < m.end {
		op := c.u8()
		var err error
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			err = m.advance(uint64(op&0x3f), cie)
		case 2: // DW_CFA_offset
			m.set(uint64(op&0x3f), regRule{ruleOffset, int64(c.uleb()) * m.ci.dataAlign})
		case 3: // DW_CFA_restore
			m.restore(uint64(op & 0x3f))
		default:
			err = m.extended(c, op, cie)
		}
		if c.bad {
			return errCFA
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// extended executes the instructions whose opcode is a whole byte.
func (m *machine) extended(c *cursor, op uint8, cie bool) error {
	da := m.ci.dataAlign
	switch op {
	case 0x00: // DW_CFA_nop
	case 0x01: // DW_CFA_set_loc
		to, err := c.pointer(m.ci.fdeEnc)
		if err != nil || c.bad || cie || to < m.loc {
			return errCFA
		}
		m.moveTo(to)
	case 0x02: // DW_CFA_advance_loc1
		return m.advance(uint64(c.u8()), cie)
	case 0x03: // DW_CFA_advance_loc2
		return m.advance(uint64(c.u16()), cie)
	case 0x04: // DW_CFA_advance_loc4
		return m.advance(uint64(c.u32()), cie)
	case 0x05: // DW_CFA_offset_extended
		m.set(c.uleb(), regRule{ruleOffset, int64(c.uleb()) * da})
	case 0x06: // DW_CFA_restore_extended
		m.restore(c.uleb())
	case 0x07: // DW_CFA_undefined
		m.set(c.uleb(), regRule{how: ruleUndefined})
	case 0x08: // DW_CFA_same_value
		m.set(c.uleb(), regRule{how: ruleSame})
	case 0x09: // DW_CFA_register
		m.set(c.uleb(), regRule{how: ruleOther})
		c.uleb()
	case 0x0a: // DW_CFA_remember_state
		if len(m.stack) >= maxStack {
			return errCFA
		}
		m.stack = append(m.stack, m.s)
	case 0x0b: // DW_CFA_restore_state
		if len(m.stack) == 0 {
			return errCFA
		}
		m.s = m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
	case 0x0c: // DW_CFA_def_cfa
		m.s.cfaReg, m.s.cfaOff, m.s.cfaExpr = c.uleb(), int64(c.uleb()), false
	case 0x0d: // DW_CFA_def_cfa_register
		m.s.cfaReg, m.s.cfaExpr = c.uleb(), false
	case 0x0e: // DW_CFA_def_cfa_offset
		m.s.cfaOff = int64(c.uleb())
	case 0x0f: // DW_CFA_def_cfa_expression
		c.skip(c.uleb())
		m.s.cfaExpr = true
	case 0x10, 0x16: // DW_CFA_expression, DW_CFA_val_expression
		m.set(c.uleb(), regRule{how: ruleOther})
		c.skip(c.uleb())
	case 0x11: // DW_CFA_offset_extended_sf
		m.set(c.uleb(), regRule{ruleOffset, c.sleb() * da})
	case 0x12: // DW_CFA_def_cfa_sf
		m.s.cfaReg, m.s.cfaOff, m.s.cfaExpr = c.uleb(), c.sleb()*da, false
	case 0x13: // DW_CFA_def_cfa_offset_sf
		m.s.cfaOff = c.sleb() * da
	case 0x14: // DW_CFA_val_offset
		m.set(c.uleb(), regRule{how: ruleOther})
		c.uleb()
	case 0x15: // DW_CFA_val_offset_sf
		m.set(c.uleb(), regRule{how: ruleOther})
		c.sleb()
	case 0x2e: // DW_CFA_GNU_args_size
		c.uleb()
	case 0x2d: // DW_CFA_AARCH64_negate_ra_state (DW_CFA_GNU_window_save elsewhere)
		if !m.arch.raSlots {
			return errOpcode
		}
		// The saved return address is signed: the library strips the signature.
	case 0x2f: // DW_CFA_GNU_negative_offset_extended
		m.set(c.uleb(), regRule{ruleOffset, -int64(c.uleb()) * da})
	default:
		return errOpcode
	}
	return nil
}

// set gives reg the rule r, if reg is one a row describes.
func (m *machine) set(reg uint64, r regRule) {
	switch reg {
	case m.arch.fp:
		m.s.rbp = r
	case m.arch.ra:
		m.s.ra = r
	}
}

// restore gives reg back the rule the CIE's initial instructions left it.
func (m *machine) restore(reg uint64) {
	switch reg {
	case m.arch.fp:
		m.s.rbp = m.init.rbp
	case m.arch.ra:
		m.s.ra = m.init.ra
	}
}

// advance moves the location by delta code alignment factors.
func (m *machine) advance(delta uint64, cie bool) error {
	if cie {
		return errCFA
	}
	d := delta * m.ci.codeAlign
	if m.ci.codeAlign != 0 && d/m.ci.codeAlign != delta || m.loc+d < m.loc {
		return errCFA
	}
	m.moveTo(m.loc + d)
	return nil
}

// moveTo ends the current row at to.
func (m *machine) moveTo(to uint64) {
	if m.loc < m.end {
		m.emit(m.loc, m.s.rule(m.arch))
	}
	m.loc = to
}
