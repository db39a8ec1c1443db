package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// benchAddrs spreads n addresses over the function symbols of path: several
// pcs per function, the way a profile's stacks hit many functions.
func benchAddrs(b *testing.B, path string, n int) []uint64 {
	b.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	dyn, _ := ef.DynamicSymbols()
	var fns []elf.Symbol
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value != 0 {
			fns = append(fns, s)
		}
	}
	if len(fns) == 0 {
		b.Fatalf("%s: no function symbols", path)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].Value < fns[j].Value })
	out := make([]uint64, 0, n)
	for i := 0; len(out) < n; i++ {
		s := fns[(i*7919)%len(fns)]
		out = append(out, s.Value+uint64(i*13)%s.Size)
	}
	return out
}

// genC generates a C program with many functions and inlining, standing in
// for an application built with -g.
func genC(nfunc int) string {
	var sb strings.Builder
	sb.WriteString("#include <stdlib.h>\n")
	for i := 0; i < nfunc; i++ {
		fmt.Fprintf(&sb, `static inline __attribute__((always_inline)) int leaf%d(int x) {
	return x * %d + rand();
}
__attribute__((noinline)) int f%d(int x) {
	int s = 0;
	for (int i = 0; i < x; i++)
		s += leaf%d(i) %% (i + 1);
	return s;
}
`, i, i+1, i, i)
	}
	sb.WriteString("int main(int argc, char **argv) {\n\t(void)argv;\n\tint s = 0;\n")
	for i := 0; i < nfunc; i++ {
		fmt.Fprintf(&sb, "\ts += f%d(argc);\n", i)
	}
	sb.WriteString("\treturn s;\n}\n")
	return sb.String()
}

func benchLookup(b *testing.B, path string) {
	addrs := benchAddrs(b, path, 10000)
	f, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.Lookup(addrs[i%len(addrs)])
	}
}

// benchCold measures a fresh Open plus lookups of all 10k addresses: the
// cost the agent pays the first time it symbolizes a module.
func benchCold(b *testing.B, path string) {
	addrs := benchAddrs(b, path, 10000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range addrs {
			f.Lookup(a)
		}
		f.Close()
	}
}

// benchFirst measures Open plus a handful of lookups, the case a large
// library with full debug info must keep cheap.
func benchFirst(b *testing.B, path string) {
	addrs := benchAddrs(b, path, 5)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range addrs {
			f.Lookup(a)
		}
		f.Close()
	}
}

func needLibc(b *testing.B) {
	if _, err := os.Stat(libcPath); err != nil {
		b.Skipf("SKIPPING: %s not present", libcPath)
	}
}

func benchBinary(b *testing.B) string {
	return compile(b, b.TempDir(), "bench", "c", "gcc", genC(400), "-g", "-O2")
}

func BenchmarkLookupLibc(b *testing.B)         { needLibc(b); benchLookup(b, libcPath) }
func BenchmarkLookupLibcCold10k(b *testing.B)  { needLibc(b); benchCold(b, libcPath) }
func BenchmarkLookupLibcFirst5(b *testing.B)   { needLibc(b); benchFirst(b, libcPath) }
func BenchmarkLookupDebugBinary(b *testing.B)  { benchLookup(b, benchBinary(b)) }
func BenchmarkLookupDebugCold10k(b *testing.B) { benchCold(b, benchBinary(b)) }
