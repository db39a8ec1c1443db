// Package seccomp reads the seccomp filters a process runs under and says
// whether they let heaplens attach: it evaluates each filter's classic BPF
// program, as the kernel would, on every system call the injection and the
// attached library make (Needed; docs/attach.md, "Seccomp filters").
package seccomp

import (
	"encoding/binary"
	"fmt"
)

// Insn is one classic BPF instruction (struct sock_filter).
type Insn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// Data is what a seccomp filter sees of a system call (struct seccomp_data).
type Data struct {
	Nr   int32
	Arch uint32
	IP   uint64 // instruction_pointer
	Args [6]uint64
}

// dataSize is sizeof(struct seccomp_data): what BPF_LEN loads.
const dataSize = 64

// word is the 32-bit word at offset k (aligned, inside) of d, as laid
// out on x86-64: little-endian, the low half of a 64-bit field first.
func (d *Data) word(k uint32) uint32 {
	var v uint64
	switch {
	case k == 0:
		return uint32(d.Nr)
	case k == 4:
		return d.Arch
	case k < 16:
		v = d.IP
	default:
		v = d.Args[(k-16)/8]
	}
	if k&4 != 0 {
		return uint32(v >> 32)
	}
	return uint32(v)
}

// Instruction classes and fields (linux/filter.h).
const (
	clsLD, clsLDX, clsST, clsSTX, clsALU, clsJMP, clsRET, clsMISC = 0, 1, 2, 3, 4, 5, 6, 7

	sizeW                          = 0x00
	modeIMM, modeABS, modeMEM      = 0x00, 0x20, 0x60
	modeLEN                        = 0x80
	srcK, srcX                     = 0x00, 0x08
	rvalA                          = 0x10
	miscTAX, miscTXA               = 0x00, 0x80
	jmpJA, jmpJEQ, jmpJGT, jmpJGE  = 0x00, 0x10, 0x20, 0x30
	jmpJSET                        = 0x40
	aluADD, aluSUB, aluMUL, aluDIV = 0x00, 0x10, 0x20, 0x30
	aluOR, aluAND, aluLSH, aluRSH  = 0x40, 0x50, 0x60, 0x70
	aluNEG, aluMOD, aluXOR         = 0x80, 0x90, 0xa0

	memWords = 16   // BPF_MEMWORDS
	maxInsns = 4096 // BPF_MAXINSNS
)

// allowed are the instructions seccomp_check_filter lets through.
var allowed = func() map[uint16]bool {
	m := map[uint16]bool{
		clsLD | sizeW | modeABS: true, clsLD | sizeW | modeLEN: true, clsLDX | sizeW | modeLEN: true,
		clsLD | modeIMM: true, clsLDX | modeIMM: true, clsLD | modeMEM: true, clsLDX | modeMEM: true,
		clsST: true, clsSTX: true, clsRET | srcK: true, clsRET | rvalA: true,
		clsMISC | miscTAX: true, clsMISC | miscTXA: true, clsALU | aluNEG: true, clsJMP | jmpJA: true,
	}
	for _, src := range []uint16{srcK, srcX} {
		for _, op := range []uint16{aluADD, aluSUB, aluMUL, aluDIV, aluOR, aluAND, aluLSH, aluRSH, aluMOD, aluXOR} {
			m[clsALU|op|src] = true
		}
		for _, op := range []uint16{jmpJEQ, jmpJGT, jmpJGE, jmpJSET} {
			m[clsJMP|op|src] = true
		}
	}
	return m
}()

// Validate checks prog as the kernel's seccomp_check_filter and
// bpf_check_classic do: only the instructions seccomp accepts, loads
// within struct seccomp_data, jumps forward inside the program, a return
// at the end. A valid program ends in at most len(prog) steps.
func Validate(prog []Insn) error {
	if len(prog) == 0 || len(prog) > maxInsns {
		return fmt.Errorf("a filter of %d instructions (1 to %d)", len(prog), maxInsns)
	}
	for i, in := range prog {
		bad := func(why string) error { return fmt.Errorf("instruction %d (%#04x): %s", i, in.Code, why) }
		if !allowed[in.Code] {
			return bad("an instruction seccomp does not allow")
		}
		switch op := in.Code &^ 0xf; in.Code & 7 {
		case clsLD, clsLDX, clsST, clsSTX:
			if in.Code&^7 == sizeW|modeABS && (in.K >= dataSize || in.K&3 != 0) {
				return bad("a load outside struct seccomp_data")
			}
			if (in.Code&^7 == modeMEM || in.Code&7 == clsST || in.Code&7 == clsSTX) && in.K >= memWords {
				return bad("scratch memory out of range")
			}
		case clsALU:
			if in.Code&srcX == 0 && ((op == aluDIV || op == aluMOD) && in.K == 0 || (op == aluLSH || op == aluRSH) && in.K >= 32) {
				return bad("a division by zero or a shift too far")
			}
		case clsJMP:
			rest := uint64(len(prog) - i - 1)
			if op == jmpJA && uint64(in.K) >= rest || op != jmpJA && (uint64(in.Jt) >= rest || uint64(in.Jf) >= rest) {
				return bad("a jump out of the program")
			}
		}
	}
	if last := prog[len(prog)-1].Code; last&7 != clsRET {
		return fmt.Errorf("the filter does not end with a return")
	}
	return nil
}

// Run evaluates prog on d and returns what it returns (SECCOMP_RET_*).
// prog must have passed Validate; a program that did not is refused, and
// the steps are bounded whatever it holds.
func Run(prog []Insn, d *Data) (uint32, error) {
	if err := Validate(prog); err != nil {
		return 0, err
	}
	return run(prog, d)
}

// run is Run on a program that passed Validate.
func run(prog []Insn, d *Data) (uint32, error) {
	var a, x uint32
	var mem [memWords]uint32
	for pc, steps := 0, 0; pc < len(prog) && steps <= len(prog); pc, steps = pc+1, steps+1 {
		in := prog[pc]
		switch in.Code & 7 {
		case clsLD, clsLDX:
			var v uint32
			switch in.Code &^ 7 { // Validate let no other through (an absolute load only for A)
			case sizeW | modeABS:
				v = d.word(in.K)
			case sizeW | modeLEN:
				v = dataSize
			case modeIMM:
				v = in.K
			case modeMEM:
				v = mem[in.K]
			}
			if in.Code&7 == clsLD {
				a = v
			} else {
				x = v
			}
		case clsST:
			mem[in.K] = a
		case clsSTX:
			mem[in.K] = x
		case clsALU:
			v := in.K
			if in.Code&srcX != 0 {
				v = x
			}
			switch in.Code &^ 0xf {
			case aluADD:
				a += v
			case aluSUB:
				a -= v
			case aluMUL:
				a *= v
			case aluDIV, aluMOD:
				if v == 0 {
					return 0, nil // the kernel's program ends, returning 0 (SECCOMP_RET_KILL_THREAD)
				}
				if in.Code&^0xf == aluDIV {
					a /= v
				} else {
					a %= v
				}
			case aluOR:
				a |= v
			case aluAND:
				a &= v
			case aluLSH:
				a = shift(a, v, true)
			case aluRSH:
				a = shift(a, v, false)
			case aluNEG:
				a = -a
			case aluXOR:
				a ^= v
			}
		case clsJMP:
			v := in.K
			if in.Code&srcX != 0 {
				v = x
			}
			var taken bool
			switch in.Code &^ 0xf {
			case jmpJA:
				pc += int(in.K)
				continue
			case jmpJEQ:
				taken = a == v
			case jmpJGT:
				taken = a > v
			case jmpJGE:
				taken = a >= v
			case jmpJSET:
				taken = a&v != 0
			}
			if taken {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case clsRET:
			if in.Code&rvalA != 0 {
				return a, nil
			}
			return in.K, nil
		case clsMISC:
			if in.Code == clsMISC|miscTAX {
				x = a
			} else {
				a = x
			}
		}
	}
	return 0, fmt.Errorf("the filter ran off its end")
}

// shift as the kernel's BPF interpreter does on x86-64: the count modulo 32.
func shift(a, n uint32, left bool) uint32 {
	if left {
		return a << (n & 31)
	}
	return a >> (n & 31)
}

// Decode reads a program as PTRACE_SECCOMP_GET_FILTER gives it: 8 bytes
// an instruction.
func Decode(b []byte) ([]Insn, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("a filter of %d bytes, not whole instructions", len(b))
	}
	prog := make([]Insn, len(b)/8)
	le := binary.LittleEndian
	for i := range prog {
		p := b[8*i:]
		prog[i] = Insn{Code: le.Uint16(p), Jt: p[2], Jf: p[3], K: le.Uint32(p[4:])}
	}
	return prog, Validate(prog)
}
