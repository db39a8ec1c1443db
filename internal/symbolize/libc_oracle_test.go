package symbolize

import (
	"debug/elf"
	"github.com/heaplens/heaplens/test/testenv"
	"os"
	"sort"
	"testing"
)

// TestLibcAgainstAddr2line compares lookups in Debian's libc (with the
// libc6-dbg debug file when installed) with addr2line over a spread of pcs.
func TestLibcAgainstAddr2line(t *testing.T) {
	if _, err := os.Stat(libcPath); err != nil {
		testenv.Missing(t, "%s (Debian's libc6): the addr2line comparison does NOT run", libcPath)
		return
	}
	needTool(t, "addr2line")
	ef, err := elf.Open(libcPath)
	if err != nil {
		t.Fatal(err)
	}
	dyn, _ := ef.DynamicSymbols()
	ef.Close()
	var fns []elf.Symbol
	for _, s := range dyn {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			fns = append(fns, s)
		}
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].Value < fns[j].Value })
	n := 2000
	if testing.Short() {
		n = 200
	}
	var addrs []uint64
	for i := 0; i < n; i++ {
		s := fns[(i*7919)%len(fns)]
		addrs = append(addrs, s.Value+uint64(i*37)%s.Size)
	}
	f, err := Open(libcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	compareWithAddr2line(t, f, libcPath, addrs, false)
}
