package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/test/testenv"
)

// needTool fails the test, loudly, when a toolchain program is missing.
func needTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testenv.Missing(t, "%s not found in PATH: this test compiles real binaries and needs gcc/g++ and binutils (scripts/deps.sh)", name)
		t.FailNow()
	}
}

// run runs a command and fails the test on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// compile writes src to dir/name.<ext> and builds it with compiler and
// flags into dir/name, returning the binary's path.
func compile(t testing.TB, dir, name, ext, compiler, src string, flags ...string) string {
	t.Helper()
	needTool(t, compiler)
	srcPath := filepath.Join(dir, name+"."+ext)
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := append(append([]string{}, flags...), "-o", out, srcPath)
	run(t, compiler, args...)
	return out
}

// markerLine returns the 1-based line of src containing marker.
func markerLine(t testing.TB, src, marker string) int {
	t.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, marker) {
			return i + 1
		}
	}
	t.Fatalf("marker %q not in source", marker)
	return 0
}

// funcSym returns the address and size of the named symbol (.symtab first,
// then .dynsym).
func funcSym(t testing.TB, path, name string) (uint64, uint64) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	dyn, _ := ef.DynamicSymbols()
	for _, s := range append(syms, dyn...) {
		if s.Name == name && s.Value != 0 {
			return s.Value, s.Size
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return 0, 0
}

// sampleAddrs returns every step-th address of each named function.
func sampleAddrs(t testing.TB, path string, step uint64, names ...string) []uint64 {
	t.Helper()
	var out []uint64
	for _, n := range names {
		a, size := funcSym(t, path, n)
		for off := uint64(0); off < size; off += step {
			out = append(out, a+off)
		}
	}
	return out
}

// addr2line runs `addr2line -a -i -f -C` and returns its frames per address.
func addr2line(t testing.TB, path string, addrs []uint64) map[uint64][]capture.Line {
	t.Helper()
	needTool(t, "addr2line")
	args := []string{"-a", "-i", "-f", "-C", "-e", path}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	out := run(t, "addr2line", args...)
	res := make(map[uint64][]capture.Line)
	var cur uint64
	sc := bufio.NewScanner(strings.NewReader(out))
	var fn string
	odd := false
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "0x") {
			v, err := strconv.ParseUint(l[2:], 16, 64)
			if err != nil {
				t.Fatalf("addr2line: bad address line %q", l)
			}
			cur, odd = v, false
			res[cur] = nil // an address asked twice is answered twice
			continue
		}
		if !odd {
			fn, odd = l, true
			continue
		}
		odd = false
		if i := strings.Index(l, " (discriminator"); i >= 0 {
			l = l[:i]
		}
		file, line := l, 0
		if i := strings.LastIndexByte(l, ':'); i >= 0 {
			file = l[:i]
			line, _ = strconv.Atoi(l[i+1:])
		}
		if file == "??" {
			file = ""
		}
		res[cur] = append(res[cur], capture.Line{Function: fn, File: file, Line: line})
	}
	return res
}

// sameFunc compares our name with addr2line -C's, which carries parameter
// lists, cv-qualifiers and (for templates) a return type.
func sameFunc(ours, theirs string) bool {
	if ours == theirs {
		return true
	}
	t := strings.TrimSpace(theirs)
	t = strings.TrimPrefix(t, "__GI_") // we drop glibc's hidden-alias prefix
	for _, q := range []string{" const", " volatile", " &&", " &"} {
		t = strings.TrimSuffix(t, q)
	}
	if strings.HasSuffix(t, ")") {
		depth := 0
		for i := len(t) - 1; i >= 0; i-- {
			switch t[i] {
			case ')':
				depth++
			case '(':
				depth--
			}
			if depth == 0 {
				t = t[:i]
				break
			}
		}
	}
	return t == ours || strings.HasSuffix(t, " "+ours)
}

// compareWithAddr2line checks Lookup against addr2line for addrs: the same
// number of frames, function names (modulo parameter lists), line numbers and
// file base names.
//
// binutils 2.40 sometimes names the CU's primary file where the DWARF 5 line
// table names an #included one (gdb and llvm-dwarfdump agree with us), so
// callers comparing against system libraries pass checkFiles=false.
func compareWithAddr2line(t *testing.T, f *File, path string, addrs []uint64, checkFiles bool) {
	t.Helper()
	want := addr2line(t, path, addrs)
	bad := 0
	for _, a := range addrs {
		got := f.Lookup(a)
		w := want[a]
		if len(w) == 1 && w[0].Function == "??" {
			continue // addr2line knows nothing; we may know the symbol
		}
		ok := len(got) == len(w)
		for i := 0; ok && i < len(w); i++ {
			ok = sameFunc(got[i].Function, w[i].Function) &&
				got[i].Line == w[i].Line &&
				(!checkFiles || filepath.Base(got[i].File) == filepath.Base(w[i].File))
		}
		if !ok {
			bad++
			if bad <= 10 {
				t.Errorf("%#x: got %+v\n\twant (addr2line) %+v", a, got, w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d addresses differ from addr2line", bad, len(addrs))
	}
}

// funcNames returns the Function fields of lines.
func funcNames(lines []capture.Line) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Function)
	}
	return out
}
