package seccomp

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
)

// allowList is the shape libseccomp and Docker's profile give: the arch
// checked, then the number compared with each allowed one, else def.
func allowList(def uint32, nrs ...int) []Insn {
	p := []Insn{
		{Code: clsLD | sizeW | modeABS, K: 4},
		{Code: clsJMP | jmpJEQ, Jt: 1, K: unix.AUDIT_ARCH_X86_64},
		{Code: clsRET, K: retKill},
		{Code: clsLD | sizeW | modeABS, K: 0},
	}
	for i, nr := range nrs {
		p = append(p, Insn{Code: clsJMP | jmpJEQ, Jt: uint8(len(nrs) - i), K: uint32(nr)})
	}
	return append(p, Insn{Code: clsRET, K: def}, Insn{Code: clsRET, K: retAllow})
}

// denyMmapExec returns EPERM for an mmap whose prot holds PROT_EXEC: an
// argument inspected (its low word), with a scratch store and X in use.
var denyMmapExec = []Insn{
	{Code: clsLD | sizeW | modeABS, K: 0},
	{Code: clsJMP | jmpJEQ, Jt: 0, Jf: 5, K: unix.SYS_MMAP},
	{Code: clsLD | sizeW | modeABS, K: 16 + 8*2},
	{Code: clsST, K: 3},
	{Code: clsLDX | modeIMM, K: unix.PROT_EXEC},
	{Code: clsLD | modeMEM, K: 3},
	{Code: clsJMP | jmpJSET | srcX, Jt: 1, Jf: 0},
	{Code: clsRET, K: retAllow},
	{Code: clsRET, K: retEPERM},
}

func TestRun(t *testing.T) {
	docker := allowList(retEPERM, unix.SYS_READ, unix.SYS_MMAP, unix.SYS_OPENAT)
	for _, tc := range []struct {
		name string
		prog []Insn
		d    Data
		want uint32
	}{
		{"listed", docker, Data{Nr: unix.SYS_OPENAT, Arch: unix.AUDIT_ARCH_X86_64}, retAllow},
		{"first listed", docker, Data{Nr: unix.SYS_READ, Arch: unix.AUDIT_ARCH_X86_64}, retAllow},
		{"not listed", docker, Data{Nr: unix.SYS_MPROTECT, Arch: unix.AUDIT_ARCH_X86_64}, retEPERM},
		{"other arch", docker, Data{Nr: unix.SYS_READ, Arch: unix.AUDIT_ARCH_I386}, retKill},
		{"mmap rw", denyMmapExec, Data{Nr: unix.SYS_MMAP, Args: [6]uint64{0, 4096, unix.PROT_READ | unix.PROT_WRITE}}, retAllow},
		{"mmap rx", denyMmapExec, Data{Nr: unix.SYS_MMAP, Args: [6]uint64{0, 4096, unix.PROT_READ | unix.PROT_EXEC}}, retEPERM},
		{"not mmap", denyMmapExec, Data{Nr: unix.SYS_MPROTECT, Args: [6]uint64{0, 4096, unix.PROT_EXEC}}, retAllow},
		{"high word", []Insn{{Code: clsLD | sizeW | modeABS, K: 16 + 4}, {Code: clsRET | rvalA}}, Data{Args: [6]uint64{0xdeadbeef00000001}}, 0xdeadbeef},
		{"len alu", []Insn{{Code: clsLD | sizeW | modeLEN}, {Code: clsALU | aluMUL, K: 3}, {Code: clsALU | aluRSH, K: 1}, {Code: clsRET | rvalA}}, Data{}, 96},
		{"divide by X 0", []Insn{{Code: clsLDX | modeIMM}, {Code: clsALU | aluDIV | srcX}, {Code: clsRET, K: retAllow}}, Data{}, 0},
		{"ja", []Insn{{Code: clsJMP | jmpJA, K: 1}, {Code: clsRET, K: retKill}, {Code: clsRET, K: retAllow}}, Data{}, retAllow},
	} {
		got, err := Run(tc.prog, &tc.d)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %#x, %v; want %#x", tc.name, got, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		prog []Insn
		want string
	}{
		{"empty", nil, "0 instructions"},
		{"no return", []Insn{{Code: clsLD | modeIMM}}, "does not end"},
		{"load past data", []Insn{{Code: clsLD | sizeW | modeABS, K: 64}, {Code: clsRET}}, "outside"},
		{"unaligned load", []Insn{{Code: clsLD | sizeW | modeABS, K: 2}, {Code: clsRET}}, "outside"},
		{"byte load", []Insn{{Code: clsLD | 0x10 | modeABS}, {Code: clsRET}}, "does not allow"},
		{"indirect load", []Insn{{Code: clsLD | sizeW | 0x40}, {Code: clsRET}}, "does not allow"},
		{"jump out", []Insn{{Code: clsJMP | jmpJEQ, Jt: 1}, {Code: clsRET}}, "jump out"},
		{"ja out", []Insn{{Code: clsJMP | jmpJA, K: 0xffffffff}, {Code: clsRET}}, "jump out"},
		{"mem out", []Insn{{Code: clsST, K: 16}, {Code: clsRET}}, "scratch"},
		{"divide by 0", []Insn{{Code: clsALU | aluDIV}, {Code: clsRET}}, "division"},
		{"shift 32", []Insn{{Code: clsALU | aluLSH, K: 32}, {Code: clsRET}}, "shift"},
	} {
		err := Validate(tc.prog)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if _, err := Run(tc.prog, &Data{}); err == nil {
			t.Errorf("%s: ran", tc.name)
		}
	}
}

func TestAllowed(t *testing.T) {
	calls := Needed(1234)
	var all []int
	for _, c := range calls {
		all = append(all, int(c.Nr))
	}
	if err := Allowed([][]Insn{allowList(retEPERM, all...)}, calls); err != nil {
		t.Errorf("everything listed: %v", err)
	}
	// The newest filter first; the least permissive action wins over both.
	stack := [][]Insn{allowList(retAllow), denyMmapExec, allowList(retEPERM, all...)}
	err := Allowed(stack, calls)
	if b, ok := err.(*Blocked); !ok || b.Call.Name != "mmap" || b.Action != retEPERM {
		t.Fatalf("mmap with PROT_EXEC denied: %v", err)
	}
	if want := "target's seccomp filter blocks mmap (returns EPERM;"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q, want %q…", err, want)
	}
	kill := allowList(retAllow)
	kill[len(kill)-2].K = unix.SECCOMP_RET_KILL_THREAD // default: kill, for the listed
	kill = append(kill[:4], append([]Insn{{Code: clsJMP | jmpJEQ, Jt: 0, Jf: 1, K: unix.SYS_OPENAT}}, kill[4:]...)...)
	err = Allowed([][]Insn{kill}, calls)
	if err == nil || err.Error() != "target's seccomp filter blocks openat (kills the thread; heaplens needs it: "+calls[0].Why+"): attach would fail" {
		t.Errorf("openat killed: %v", err)
	}
}

func TestDecode(t *testing.T) {
	prog := allowList(retEPERM, unix.SYS_READ)
	b := make([]byte, 8*len(prog))
	for i, in := range prog {
		binary.LittleEndian.PutUint16(b[8*i:], in.Code)
		b[8*i+2], b[8*i+3] = in.Jt, in.Jf
		binary.LittleEndian.PutUint32(b[8*i+4:], in.K)
	}
	got, err := Decode(b)
	if err != nil || len(got) != len(prog) || got[5] != prog[5] {
		t.Fatalf("Decode: %v %v", got, err)
	}
	if _, err := Decode(b[:7]); err == nil {
		t.Errorf("7 bytes decoded")
	}
}

// FuzzRun: a program is untrusted input; Decode and Run never panic, and
// a program that validates always returns.
func FuzzRun(f *testing.F) {
	f.Add([]byte{0x20, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f}, []byte{1, 2, 3})
	f.Add([]byte{0x15, 0, 1, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f}, []byte{})
	f.Fuzz(func(t *testing.T, prog, data []byte) {
		var d Data
		var b [dataSize]byte
		copy(b[:], data)
		d.Nr, d.Arch, d.IP = int32(binary.LittleEndian.Uint32(b[0:])), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint64(b[8:])
		for i := range d.Args {
			d.Args[i] = binary.LittleEndian.Uint64(b[16+8*i:])
		}
		p, err := Decode(prog)
		if _, rerr := Run(p, &d); (err == nil) != (rerr == nil) {
			t.Fatalf("Decode: %v, Run: %v", err, rerr)
		}
	})
}
