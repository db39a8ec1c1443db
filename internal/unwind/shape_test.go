package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Straight-line functions (no branches, one ret at the end), so that the
// stack at each instruction follows from the instructions before it.
const shapeSource = `
extern int ext(int);
int leaf(int x) { return x * 3 + 1; }
int call1(int x) { return ext(x) + 1; }
int many(int a, int b, int c, int d, int e, int f) {
	int x1 = ext(a), x2 = ext(b + x1), x3 = ext(c + x2), x4 = ext(d + x3), x5 = ext(e + x4), x6 = ext(f + x5);
	return x1 + x2 * 3 + x3 * 5 + x4 * 7 + x5 * 11 + x6 * 13 + a + b + c + d + e + f;
}
`

// Functions of known shape, compiled with and without a frame pointer:
// the table at each of their instructions must say what the machine code
// does to rsp and rbp up to there (as objdump disassembles it), and the
// build ID must be the one readelf -n prints.
func TestKnownShapes(t *testing.T) {
	readelf := needReadelf(t)
	for _, tool := range []string{"gcc", "objdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("this test needs %s: apt-get install -y gcc binutils (%v)", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "shape.c")
	if err := os.WriteFile(src, []byte(shapeSource), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flags := range []string{"-O0 -fno-omit-frame-pointer", "-O2 -fomit-frame-pointer"} {
		t.Run(strings.Fields(flags)[0], func(t *testing.T) {
			so := filepath.Join(dir, strings.Fields(flags)[0]+".so")
			args := append(strings.Fields(flags), "-fcf-protection=none", "-shared", "-fPIC", "-Wl,--build-id", "-o", so, src)
			if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
				t.Fatalf("gcc %s: %v\n%s", args, err, out)
			}
			checkShapes(t, readelf, so)
		})
	}
}

func checkShapes(t *testing.T, readelf, so string) {
	b, id, err := BuildFile(so)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(readelf, "-n", so).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out)
	if m == nil || string(m[1]) != hex.EncodeToString(id) || !bytes.Equal(tab.ID, id) {
		t.Errorf("build ID %x (table %x), readelf -n says %q", id, tab.ID, m)
	}
	insns, err := disassemble(so)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range syms {
		switch s.Name {
		case "leaf", "call1", "many":
			found++
			checkFunction(t, tab, s, insns)
		}
	}
	if found != 3 {
		t.Errorf("found %d of the 3 functions among the symbols", found)
	}
}

// insn is one instruction as objdump prints it.
type insn struct {
	addr uint64
	text string // "push   %rbp"
}

var insnRE = regexp.MustCompile(`^\s+([0-9a-f]+):\t(.*)$`)

// disassemble returns the instructions of so's code, by address.
func disassemble(so string) (map[uint64]insn, error) {
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", so).Output()
	if err != nil {
		return nil, err
	}
	insns := map[uint64]insn{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := insnRE.FindStringSubmatch(sc.Text()); m != nil {
			a, _ := strconv.ParseUint(m[1], 16, 64)
			insns[a] = insn{a, strings.Join(strings.Fields(m[2]), " ")}
		}
	}
	return insns, sc.Err()
}

// frame is the frame at an instruction, as the instructions before it in a
// straight-line function made it.
type frame struct {
	rbpBased bool   // the CFA is rbp + off (after mov %rsp,%rbp)
	off      uint64 // the CFA is rsp (or rbp) + off
	slot     uint8  // push %rbp left the caller's rbp at CFA − 8·slot
	restored bool   // rbp holds the caller's again: slot may be 0 or stale
}

func checkFunction(t *testing.T, tab *Table, s elf.Symbol, insns map[uint64]insn) {
	fr := frame{off: 8}
	checked := 0
	for a := s.Value; a < s.Value+s.Size; {
		in, ok := insns[a]
		if !ok {
			t.Fatalf("%s: no instruction at %#x", s.Name, a)
		}
		want := Rule{Kind: KindRSP, CFAOffset: uint16(fr.off), RBPSlot: fr.slot}
		if fr.rbpBased {
			want.Kind = KindRBP
		}
		got, ok := tab.Lookup(a)
		checked++
		if fr.restored && ok && got.RBPSlot == 0 {
			want.RBPSlot = 0 // rbp is back: the slot may be named or not
		}
		if !ok || got != want {
			t.Errorf("%s+%#x (%s): table says %v (ok=%v), the code %v", s.Name, a-s.Value, in.text, got, ok, want)
		}
		next := a + 1
		for insns[next].addr == 0 && next < s.Value+s.Size {
			next++
		}
		if err := fr.step(in.text, next == s.Value+s.Size); err != nil {
			t.Fatalf("%s+%#x: %v: the test's model of gcc's code does not hold", s.Name, a-s.Value, err)
		}
		a = next
	}
	t.Logf("%s: %d instructions checked", s.Name, checked)
}

var (
	pushPopRE = regexp.MustCompile(`^(push|pop) %(\w+)$`)
	rspImmRE  = regexp.MustCompile(`^(sub|add) \$0x([0-9a-f]+),%rsp$`)
)

// step executes the stack effect of the instruction text; last says
// whether it is the function's last.
func (fr *frame) step(text string, last bool) error {
	op := strings.Fields(text)[0]
	if m := pushPopRE.FindStringSubmatch(text); m != nil {
		return fr.pushPop(m[1] == "push", m[2])
	}
	if m := rspImmRE.FindStringSubmatch(text); m != nil {
		n, _ := strconv.ParseUint(m[2], 16, 64)
		if !fr.rbpBased {
			if m[1] == "sub" {
				fr.off += n
			} else {
				fr.off -= n
			}
		}
		return nil
	}
	switch {
	case text == "mov %rsp,%rbp":
		fr.rbpBased = true
	case op == "leave":
		fr.rbpBased, fr.off, fr.restored = false, 8, true
	case op == "ret":
		if !last {
			return fmt.Errorf("ret before the end")
		}
	case op == "call" || op == "nop" || op == "endbr64":
	case strings.HasPrefix(op, "j") || strings.HasSuffix(text, ",%rsp") || strings.HasSuffix(text, ",%rbp") && fr.rbpBased:
		return fmt.Errorf("%q changes the flow or the frame", text)
	}
	return nil
}

func (fr *frame) pushPop(push bool, reg string) error {
	switch {
	case fr.rbpBased && reg == "rbp" && !push:
		// pop %rbp where rsp == rbp (no locals below): rsp is then just
		// above the saved rbp, at the return address.
		fr.rbpBased, fr.off, fr.restored = false, 8, true
	case fr.rbpBased:
		return fmt.Errorf("%s %%%s in an rbp frame", map[bool]string{true: "push", false: "pop"}[push], reg)
	case push:
		fr.off += 8
		if reg == "rbp" {
			fr.slot = uint8(fr.off / 8)
		}
	default:
		fr.off -= 8
		if reg == "rbp" {
			fr.restored = true
		}
	}
	return nil
}
