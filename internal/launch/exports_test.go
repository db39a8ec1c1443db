package launch

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The C program that prints preload/hooks.h's lists of interposed
// functions: "A name" for each function attach routes (HL_HOOKED), "P name"
// for each the preloaded library wraps besides (HL_PRELOADED_ONLY).
const hookedLister = `#include <stdio.h>
#include "hooks.h"
#define ROUTED(name, ...) puts("A " #name);
#define PRELOADED(name, ...) puts("P " #name);
int main(void)
{
	HL_HOOKED(ROUTED)
	HL_PRELOADED_ONLY(PRELOADED)
	return 0;
}
`

// apiDecl matches a function declared in preload/heaplens.h, the public API.
var apiDecl = regexp.MustCompile(`(?m)^[a-z][\w ]*?\**\b(heaplens_\w+)\(`)

// TestExportsAreTheHookedList reads the dynamic symbols that the library
// and the attach library, as built by make, define (what nm -D
// --defined-only lists) and compares them with the one list of hooked
// functions in preload/hooks.h, compiled, plus the public API that
// preload/heaplens.h declares and two names the library answers to:
// ompt_start_tool (openmp.c: LLVM's and Intel's OpenMP runtimes look it up)
// and, attached, heaplens_control (attach.c: the agent's control block). A
// function interposed but not listed, or listed but not defined, fails it.
func TestExportsAreTheHookedList(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to compile preload/hooks.h (scripts/deps.sh installs it): %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	preload := filepath.Join(filepath.Dir(file), "..", "..", "preload")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "hooked.c"), filepath.Join(dir, "hooked")
	if err := os.WriteFile(src, []byte(hookedLister), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=c11", "-D_GNU_SOURCE", "-I", preload, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compiling the list of hooks.h: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running the list of hooks.h: %v", err)
	}
	var routed, preloadedOnly []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kind, name, _ := strings.Cut(line, " ")
		if kind == "A" {
			routed = append(routed, name)
		} else {
			preloadedOnly = append(preloadedOnly, name)
		}
	}
	if len(routed) == 0 || len(preloadedOnly) == 0 {
		t.Fatalf("hooks.h lists %d routed and %d preloaded-only functions:\n%s", len(routed), len(preloadedOnly), out)
	}
	h, err := os.ReadFile(filepath.Join(preload, "heaplens.h"))
	if err != nil {
		t.Fatal(err)
	}
	var api []string
	for _, m := range apiDecl.FindAllSubmatch(h, -1) {
		api = append(api, string(m[1]))
	}
	if len(api) == 0 {
		t.Fatal("no function declared in preload/heaplens.h")
	}
	common := append(append(routed, api...), "ompt_start_tool")
	for _, l := range []struct {
		name string
		b    []byte
		want []string
	}{
		{"libheaplens.so", library, append(slices.Clone(common), preloadedOnly...)},
		{"libheaplens-attach.so", attachLibraryBytes, append(slices.Clone(common), "heaplens_control")},
	} {
		if len(l.b) == 0 {
			t.Errorf("!!! %s is not embedded: build it with make first (make test does); its exports are NOT checked", l.name)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(l.b))
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range syms {
			if s.Section != elf.SHN_UNDEF {
				got = append(got, s.Name)
			}
		}
		slices.Sort(got)
		want := slices.Clone(l.want)
		slices.Sort(want)
		for i := 1; i < len(want); i++ {
			if want[i] == want[i-1] {
				t.Errorf("%s is listed twice", want[i])
			}
		}
		for _, n := range want {
			if _, ok := slices.BinarySearch(got, n); !ok {
				t.Errorf("%s does not export %s, which preload/hooks.h or heaplens.h lists", l.name, n)
			}
		}
		for _, n := range got {
			if _, ok := slices.BinarySearch(want, n); !ok {
				t.Errorf("%s exports %s, which neither preload/hooks.h nor heaplens.h lists", l.name, n)
			}
		}
	}
}
