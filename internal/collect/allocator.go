package collect

import (
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
