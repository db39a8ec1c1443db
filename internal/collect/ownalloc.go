package collect

import (
	"debug/elf"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/size"
)

// ownAllocators are allocators a program links into its executable beside
// malloc (Rust's tikv-jemallocator and mimalloc crates, a C++ service's
// bundled jemalloc): the symbol that tells one is there, and the prefix of
// its functions' names.
var ownAllocators = []struct{ symbol, name string }{
	{"_rjem_mallocx", "jemalloc"},
	{"je_mallocx", "jemalloc"},
	{"mi_malloc", "mimalloc"},
	{"tc_malloc", "tcmalloc"},
}

// ownPrefixes are the name prefixes of an allocator's functions, whose
// addresses span its code in the executable.
var ownPrefixes = map[string][]string{
	"_rjem_mallocx": {"_rjem_"},
	"je_mallocx":    {"je_"},
	"mi_malloc":     {"mi_", "_mi_"},
	"tc_malloc":     {"tc_", "_ZN8tcmalloc"},
}

// ownAllocator is such an allocator: its calls are direct, never through
// a GOT entry, so heaplens sees none of its allocations, only the memory it
// maps (docs/allocators.md).
type ownAllocator struct {
	name   string // "jemalloc"
	lo, hi uint64 // from its first function to the end of its last, as linked
}

// findOwnAllocator looks for one in an executable that does not define
// malloc itself (definesMalloc covers that one): nil if there is none.
func findOwnAllocator(exe string) *ownAllocator {
	f, err := elf.Open(exe)
	if err != nil {
		return nil
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		if syms, err = f.DynamicSymbols(); err != nil {
			return nil
		}
	}
	defined := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			defined[s.Name] = true
		}
	}
	for _, a := range ownAllocators {
		if !defined[a.symbol] {
			continue
		}
		o := &ownAllocator{name: a.name, lo: ^uint64(0)}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC || !hasAnyPrefix(s.Name, ownPrefixes[a.symbol]) {
				continue
			}
			o.lo, o.hi = min(o.lo, s.Value), max(o.hi, s.Value+s.Size)
		}
		return o
	}
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ownState follows one process's own allocator: which of its stacks pass
// through it, and the mappings sampled with such a stack.
type ownState struct {
	alloc  *ownAllocator
	stacks map[uint64]bool // stack ID -> a native frame in the allocator
	bytes  float64         // estimated bytes it mapped
	maps   int             // sampled mappings
}

// ownAllocatorOf finds the executable's own allocator once per file.
func (c *Collector) ownAllocatorOf(h ring.Header) *ownState {
	if c.owns == nil {
		c.owns = map[string]*ownAllocator{}
	}
	o, ok := c.owns[h.Exe]
	if !ok {
		o = findOwnAllocator(h.Exe)
		c.owns[h.Exe] = o
	}
	if o == nil {
		return nil
	}
	return &ownState{alloc: o, stacks: map[uint64]bool{}}
}

// seeStack notes whether a new stack passes through the own allocator.
func (s *stream) seeStack(sid uint64, frames []uint64) {
	if _, ok := s.own.stacks[sid]; ok {
		return
	}
	in := false
	for _, pc := range frames {
		if m := s.lookup(pc); m != nil && m.path == s.hdr.Exe && pc-m.bias-s.own.alloc.lo < s.own.alloc.hi-s.own.alloc.lo {
			in = true
			break
		}
	}
	s.own.stacks[sid] = in
}

// seeAlloc counts a sampled mapping made from inside the own allocator.
func (s *stream) seeAlloc(rec *ring.Record, sid uint64) {
	if capture.MemKind(rec.Func) == capture.MemMmap && s.own.stacks[sid] {
		s.own.bytes += float64(rec.Size) * heap.Weight(rec.Size, s.hdr.Rate)
		s.own.maps++
	}
}

// ownNote says, at the process's end, what its own allocator hid.
func (c *Collector) ownNote(s *stream) {
	o := s.own
	mapped := size.FormatSize(uint64(o.bytes + 0.5))
	if s.hdr.Rate > 1 {
		mapped = "~" + size.Human(o.bytes)
	}
	c.warn("pid %d (%s): allocations inside %s's own %s are not seen: only its mappings are, %s in %d sampled mappings, counted as the program's mmap memory (docs/allocators.md)",
		s.hdr.PID, command(s.hdr), s.hdr.Exe, o.alloc.name, mapped, o.maps)
}
