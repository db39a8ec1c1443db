package symbolize

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/test/testenv"
)

// cSrc has a noinline function (outer) whose body inlines middle, which
// inlines inner; the markers give the lines the frames must report.
const cSrc = `#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((always_inline)) int inner(int x) {
	int y = x * 3;
	y += rand(); /* INNER */
	return y;
}

static inline __attribute__((always_inline)) int middle(int x) {
	return inner(x + 1) * 2; /* MIDDLE */
}

__attribute__((noinline)) int outer(int x) {
	int r = middle(x); /* OUTER */
	return r + 1;
}

static __attribute__((noinline)) int helper(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += rand() % (i + 1);
	return s;
}

__attribute__((noinline)) int exported(int n) {
	return helper(n) + outer(n);
}

__asm__(".text\n.globl nosize\n.type nosize,@function\nnosize:\n\tnop\n\tnop\n\tnop\n\tret\n");

int main(int argc, char **argv) {
	(void)argv;
	printf("%d\n", exported(argc));
	return 0;
}
`

// cFuncs are the functions of cSrc compared against addr2line.
var cFuncs = []string{"outer", "helper", "exported", "main"}

func TestInlinedFrames(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"dwarf5", []string{"-g", "-O2", "-fomit-frame-pointer"}},
		{"dwarf4", []string{"-gdwarf-4", "-O2", "-fomit-frame-pointer"}},
		// Discarded sections leave line sequences and CU ranges at 0, and
		// the CU gets DW_AT_ranges instead of low/high pc.
		{"gc-sections", []string{"-g", "-O2", "-ffunction-sections", "-Wl,--gc-sections"}},
		{"O1", []string{"-g", "-O1"}},
		{"pie-shared", []string{"-g", "-O2", "-fPIC", "-shared"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := compile(t, dir, "inl_"+tc.name, "c", "gcc", cSrc, tc.flags...)
			f, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			// Find a pc of the inlined rand() call via addr2line and check
			// the whole chain against the source markers.
			addrs := sampleAddrs(t, bin, 1, "outer")
			ref := addr2line(t, bin, addrs)
			want := []capture.Line{
				{Function: "inner", File: "", Line: markerLine(t, cSrc, "INNER")},
				{Function: "middle", File: "", Line: markerLine(t, cSrc, "MIDDLE")},
				{Function: "outer", File: "", Line: markerLine(t, cSrc, "OUTER")},
			}
			found := false
			for _, a := range addrs {
				r := ref[a]
				if len(r) != 3 || r[0].Line != want[0].Line {
					continue
				}
				found = true
				got := f.Lookup(a)
				for i := range got {
					if filepath.Base(got[i].File) != "inl_"+tc.name+".c" || !filepath.IsAbs(got[i].File) {
						t.Errorf("%#x frame %d: file %q, want absolute path of the source", a, i, got[i].File)
					}
					got[i].File = ""
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%#x: got %+v, want %+v", a, got, want)
				}
			}
			if !found {
				t.Fatalf("no address of outer has the inlined line %d per addr2line", want[0].Line)
			}

			compareWithAddr2line(t, f, bin, sampleAddrs(t, bin, 1, cFuncs...), true)
		})
	}
}

func TestSymtabFallback(t *testing.T) {
	dir := t.TempDir()
	bin := compile(t, dir, "nodebug", "c", "gcc", cSrc, "-O2")
	lib := compile(t, dir, "libnodebug.so", "c", "gcc", cSrc, "-O2", "-shared", "-fPIC")
	stripped := filepath.Join(dir, "libstripped.so")
	run(t, "strip", "--strip-all", "-o", stripped, lib)

	type check struct {
		sym    string // symbol whose address (+off) is looked up
		off    uint64
		want   string // expected function; "" = must not be sym
		inFile string // file that has the symbol (for the address)
	}
	for _, tc := range []struct {
		name   string
		path   string
		checks []check
	}{
		{"executable", bin, []check{
			{"outer", 0, "outer", bin},
			{"outer", 3, "outer", bin},
			{"helper", 5, "helper", bin}, // static: .symtab only
			{"nosize", 2, "nosize", bin}, // size 0: nearest preceding, same section
		}},
		{"stripped-shared", stripped, []check{
			{"exported", 4, "exported", lib}, // in .dynsym
			{"helper", 4, "", lib},           // static: gone with .symtab
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, c := range tc.checks {
				a, _ := funcSym(t, c.inFile, c.sym)
				got := f.Lookup(a + c.off)
				if c.want == "" {
					if len(got) > 0 && got[0].Function == c.sym {
						t.Errorf("%s+%d: got %+v, want anything but %s", c.sym, c.off, got, c.sym)
					}
					continue
				}
				want := []capture.Line{{Function: c.want}}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s+%d: got %+v, want %+v", c.sym, c.off, got, want)
				}
			}
		})
	}
}

const cxxSrc = `#include <cstdlib>
#include <vector>
namespace ns {
class Klass {
public:
	explicit Klass(int v) : v_(v) {}
	__attribute__((noinline)) int method(int x);
	int get() const { return v_ + rand(); }
private:
	int v_;
};
int Klass::method(int x) {
	return get() * x;
}
template <typename T> __attribute__((noinline)) T add(T a, T b) { return a + b + (T)rand(); }
}
int main(int argc, char **) {
	ns::Klass *k = new ns::Klass(argc);
	std::vector<int> v;
	v.push_back(k->method(argc));
	int r = ns::add<int>(v[0], 2) + (int)ns::add<double>(1.0, 2.0);
	delete k;
	return r;
}
`

func TestCxx(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"g", []string{"-g", "-O2"}},
		{"nodebug", []string{"-O2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := compile(t, dir, "cxx_"+tc.name, "cc", "g++", cxxSrc, tc.flags...)
			f, err := Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for sym, want := range map[string]string{
				"_ZN2ns5Klass6methodEi":  "ns::Klass::method",
				"_ZN2ns3addIiEET_S1_S1_": "ns::add<int>",
				"_ZN2ns3addIdEET_S1_S1_": "ns::add<double>",
			} {
				a, _ := funcSym(t, bin, sym)
				got := f.Lookup(a)
				if len(got) == 0 || got[len(got)-1].Function != want {
					t.Errorf("%s: got %+v, want outermost %s", sym, got, want)
				}
			}
			if tc.name == "g" {
				compareWithAddr2line(t, f, bin, sampleAddrs(t, bin, 1,
					"_ZN2ns5Klass6methodEi", "_ZN2ns3addIiEET_S1_S1_", "main"), true)
			}
		})
	}
}

const rustSrc = `
void legacy(void) __asm__("_ZN7mycrate6module8function17h0123456789abcdefE");
void v0(void) __asm__("_RNvCs1234_7mycrate4func");
__attribute__((noinline)) void legacy(void) { __asm__ volatile("nop; nop; nop"); }
__attribute__((noinline)) void v0(void) { __asm__ volatile("nop; nop; nop"); }
int main(void) { legacy(); v0(); return 0; }
`

func TestRustNames(t *testing.T) {
	dir := t.TempDir()
	for _, flags := range [][]string{{"-O2"}, {"-g", "-O2"}} {
		bin := compile(t, dir, "rust", "c", "gcc", rustSrc, flags...)
		f, err := Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for sym, want := range map[string]string{
			"_ZN7mycrate6module8function17h0123456789abcdefE": "mycrate::module::function",
			"_RNvCs1234_7mycrate4func":                        "mycrate::func",
		} {
			a, _ := funcSym(t, bin, sym)
			got := f.Lookup(a + 1)
			if len(got) == 0 || got[len(got)-1].Function != want {
				t.Errorf("%v %s: got %+v, want %s", flags, sym, got, want)
			}
		}
		f.Close()
	}
}

func TestDemangleName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"malloc", "malloc"},
		{"_ZN2ns5Klass6methodEi", "ns::Klass::method"},
		{"_ZN2ns5Klass6methodEi.cold", "ns::Klass::method"},
		{"_Znwm", "operator new"},
		{"_ZN2ns3addIiEET_S1_S1_", "ns::add<int>"},
		{"_ZNSt6vectorIiSaIiEE9push_backEOi", "std::vector<int, std::allocator<int> >::push_back"},
		{"_ZN7mycrate6module8function17h0123456789abcdefE", "mycrate::module::function"},
		{"_RNvCs1234_7mycrate4func", "mycrate::func"},
		{"_Zfoo", "_Zfoo"}, // not valid: kept raw
		{"_R", "_R"},
		{"__GI___libc_malloc", "__libc_malloc"},
		{"foo.part.0", "foo.part.0"},
	} {
		if got := demangleName(tc.in); got != tc.want {
			t.Errorf("demangleName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := stripRustHash("a::b::h0123456789abcdef"); got != "a::b" {
		t.Errorf("stripRustHash: got %q", got)
	}
	if got := stripRustHash("a::b::hello"); got != "a::b::hello" {
		t.Errorf("stripRustHash: got %q", got)
	}
}

func TestBuildID(t *testing.T) {
	dir := t.TempDir()
	bin := compile(t, dir, "bid", "c", "gcc", cSrc, "-O2", "-Wl,--build-id=sha1")
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindStringSubmatch(run(t, "readelf", "-n", bin))
	if m == nil {
		t.Fatal("readelf -n shows no build ID")
	}
	f, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.BuildID(); got != m[1] {
		t.Errorf("BuildID() = %q, readelf says %q", got, m[1])
	}

	none := compile(t, dir, "nobid", "c", "gcc", cSrc, "-O2", "-Wl,--build-id=none")
	g, err := Open(none)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := g.BuildID(); got != "" {
		t.Errorf("BuildID() without a note = %q, want empty", got)
	}
}

const libcPath = "/lib/x86_64-linux-gnu/libc.so.6"

func TestLibcMalloc(t *testing.T) {
	if _, err := os.Stat(libcPath); err != nil {
		testenv.Missing(t, "%s (Debian's libc6): the libc lookup test does NOT run: %v", libcPath, err)
		return
	}
	f, err := Open(libcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, size := funcSym(t, libcPath, "malloc")
	if size == 0 {
		t.Fatal("malloc has size 0 in .dynsym")
	}
	ok := map[string]bool{"malloc": true, "__libc_malloc": true, "__malloc": true}
	for _, off := range []uint64{0, 1, size / 2, size - 1} {
		got := f.Lookup(a + off)
		if len(got) == 0 || !ok[got[len(got)-1].Function] {
			t.Errorf("malloc+%d: got %+v, want malloc or an alias", off, got)
		}
	}
	// The aliases all share malloc's address, so the name found must belong
	// to a symbol whose range holds the pc.
	for _, name := range []string{"malloc", "__libc_malloc"} {
		if v, sz := funcSym(t, libcPath, name); v != a || sz != size {
			t.Errorf("%s at %#x size %d, malloc at %#x size %d", name, v, sz, a, size)
		}
	}
}

// TestSeparateDebug splits DWARF into a debug file found by build ID under
// a private debug root, and by .gnu_debuglink in <dir>/.debug.
func TestSeparateDebug(t *testing.T) {
	dir := t.TempDir()
	flags := []string{"-g", "-O2", "-fomit-frame-pointer"}

	full := compile(t, dir, "split", "c", "gcc", cSrc, append(flags, "-Wl,--build-id=sha1")...)
	full2 := compile(t, dir, "split2", "c", "gcc", cSrc, append(flags, "-Wl,--build-id=none")...)
	outer, _ := funcSym(t, full, "outer")
	helper, _ := funcSym(t, full, "helper")
	wantFull := func(t *testing.T, path string, a uint64) []capture.Line {
		f, err := OpenWith(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return f.Lookup(a)
	}

	// Build ID layout.
	orig, err := Open(full)
	if err != nil {
		t.Fatal(err)
	}
	id := orig.BuildID()
	orig.Close()
	root := filepath.Join(dir, "debugroot")
	dbg := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "objcopy", "--only-keep-debug", full, dbg)
	stripped := filepath.Join(dir, "split.stripped")
	run(t, "strip", "--strip-all", "-o", stripped, full)

	// Debuglink layout: stripped binary with a link to .debug/split2.debug.
	dbg2 := filepath.Join(dir, ".debug", "split2.debug")
	if err := os.MkdirAll(filepath.Dir(dbg2), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "objcopy", "--only-keep-debug", full2, dbg2)
	linked := filepath.Join(dir, "split2.linked")
	run(t, "strip", "--strip-all", "-o", linked, full2)
	run(t, "objcopy", "--add-gnu-debuglink="+dbg2, linked)
	outer2, _ := funcSym(t, full2, "outer")

	for _, tc := range []struct {
		name    string
		open    func() (*File, error)
		addr    uint64
		want    []capture.Line
		buildID string
	}{
		{"build-id", func() (*File, error) { return OpenWith(stripped, []string{root}) }, outer, wantFull(t, full, outer), id},
		{"build-id-static", func() (*File, error) { return OpenWith(stripped, []string{root}) }, helper, wantFull(t, full, helper), id},
		{"cache", func() (*File, error) { c := NewCache(); c.DebugRoots = []string{root}; return c.File(stripped) }, outer, wantFull(t, full, outer), id},
		{"no-root", func() (*File, error) { return OpenWith(stripped, []string{filepath.Join(dir, "nowhere")}) }, outer, nil, id},
		{"debuglink", func() (*File, error) { return OpenWith(linked, nil) }, outer2, wantFull(t, full2, outer2), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.open()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.BuildID() != tc.buildID {
				t.Errorf("BuildID() = %q, want the original's %q", f.BuildID(), tc.buildID)
			}
			got := f.Lookup(tc.addr)
			if tc.want == nil {
				// Without the debug file a stripped executable knows
				// nothing about outer (it is not in .dynsym).
				if len(got) > 0 && got[0].Line != 0 {
					t.Errorf("got %+v without debug info", got)
				}
				return
			}
			if len(tc.want) < 1 || tc.want[0].Line == 0 {
				t.Fatalf("reference lookup has no lines: %+v", tc.want)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(dir, "missing"),
		text,
		dir,
		"[vdso]",
		"[heap]",
		"",
	} {
		f, err := Open(p)
		if err == nil {
			f.Close()
			t.Errorf("Open(%q) succeeded", p)
			continue
		}
		if !strings.HasPrefix(err.Error(), "symbolize: open ") {
			t.Errorf("Open(%q) error %q lacks context", p, err)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing")); !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: error %v does not wrap ENOENT", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestCache(t *testing.T) {
	c := NewCache()
	defer c.Close()
	dir := t.TempDir()
	bin := compile(t, dir, "cache", "c", "gcc", cSrc, "-O2")
	f1, err := c.File(bin)
	if err != nil {
		t.Fatal(err)
	}
	f2, _ := c.File(bin)
	if f1 != f2 {
		t.Error("cache opened the same path twice")
	}
	missing := filepath.Join(dir, "missing")
	if got := f1.Lookup(0); got != nil {
		t.Errorf("Lookup(0) = %+v, want nil", got)
	}
	a, _ := funcSym(t, bin, "outer")
	before := f1.Lookup(a)
	if err := f1.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if after := f1.Lookup(a); !reflect.DeepEqual(before, after) {
		t.Errorf("symtab lookup after Close: %+v, before %+v", after, before)
	}
	_, err1 := c.File(missing)
	if err := os.WriteFile(missing, []byte("now it exists"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err2 := c.File(missing)
	if err1 == nil || err1 != err2 {
		t.Errorf("failure not remembered: %v then %v", err1, err2)
	}
}
