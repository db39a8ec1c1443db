package collect

import (
	"debug/elf"
	"path/filepath"
	"strings"

	"github.com/heaplens/heaplens/internal/ring"
)

// allocatorNames are the malloc implementations reports name, by the start
// of their library's file name.
var allocatorNames = []struct{ prefix, name string }{
	{"libjemalloc", "jemalloc"},
	{"libtcmalloc", "tcmalloc"},
	{"libmimalloc", "mimalloc"},
	{"libsnmalloc", "snmalloc"},
	{"libhoard", "Hoard"},
	{"libtbbmalloc", "TBB malloc"},
}

// allocatorName says which allocator served a process's malloc, from what
// its library found (docs/allocators.md): "glibc", a known allocator with
// its file, or the file itself.
func allocatorName(h ring.Header) string {
	if h.AllocatorFlags&ring.AllocatorGlibc != 0 {
		return "glibc"
	}
	file := h.Allocator
	if file == "" {
		file = h.Exe
	}
	base := filepath.Base(file)
	for _, a := range allocatorNames {
		if strings.HasPrefix(base, a.prefix) {
			return a.name + " (" + file + ")"
		}
	}
	return file
}

// definesMalloc reports whether an executable defines malloc in its
// dynamic symbol table: it comes before every preloaded library in the
// lookup, so the program's calls (and its libraries') never reach ours.
// An undefined symbol with an address (the executable takes malloc's
// address through its PLT) is not a definition.
func definesMalloc(exe string) bool {
	f, err := elf.Open(exe)
	if err != nil {
		return false
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return false
	}
	for _, s := range syms {
		if s.Name == "malloc" && s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return true
		}
	}
	return false
}
