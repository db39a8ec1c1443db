package symbolize

import (
	"debug/elf"
	"encoding/hex"
	"io"
	"sort"
	"strings"
)

// symbol is one function symbol. Aliases (several names at one address) are
// merged into one entry named by the most presentable alias.
type symbol struct {
	addr, size uint64
	secEnd     uint64 // end of the containing section, bounds size-0 symbols
	name       string
	bind       elf.SymBind
	demangled  bool // name has been through demangle
}

// symtab is a table of function symbols sorted by address, built once.
type symtab []symbol

// appendSymbols adds the function and GNU_IFUNC symbols of .symtab and
// .dynsym of ef to dst. Errors (no table, corrupt table) only mean fewer
// symbols.
func appendSymbols(dst []symbol, ef *elf.File) []symbol {
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			typ := elf.ST_TYPE(s.Info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
				continue
			}
			if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(ef.Sections) {
				continue
			}
			if s.Value == 0 || s.Name == "" {
				continue
			}
			sec := ef.Sections[s.Section]
			end := sec.Addr + sec.Size
			if s.Value < sec.Addr || s.Value >= end {
				// A symbol outside its own section is corrupt or
				// exotic; only trust its own size.
				end = s.Value + s.Size
			}
			dst = append(dst, symbol{
				addr:   s.Value,
				size:   s.Size,
				secEnd: end,
				name:   stripVersion(s.Name),
				bind:   elf.ST_BIND(s.Info),
			})
		}
	}
	if syms, err := ef.Symbols(); err == nil {
		add(syms)
	}
	if syms, err := ef.DynamicSymbols(); err == nil {
		add(syms)
	}
	return dst
}

// stripVersion drops an ELF symbol version suffix ("memcpy@GLIBC_2.2.5").
func stripVersion(name string) string {
	if i := strings.IndexByte(name, '@'); i > 0 {
		return name[:i]
	}
	return name
}

// better reports whether a is a more presentable name than b for the same
// address: exported before local, then fewer leading underscores (malloc
// over __libc_malloc), then shorter, then alphabetical for determinism.
func better(a, b *symbol) bool {
	ra, rb := bindRank(a.bind), bindRank(b.bind)
	if ra != rb {
		return ra < rb
	}
	ua, ub := leadingUnderscores(a.name), leadingUnderscores(b.name)
	if ua != ub {
		return ua < ub
	}
	if len(a.name) != len(b.name) {
		return len(a.name) < len(b.name)
	}
	return a.name < b.name
}

func bindRank(b elf.SymBind) int {
	switch b {
	case elf.STB_GLOBAL:
		return 0
	case elf.STB_WEAK:
		return 1
	}
	return 2
}

func leadingUnderscores(s string) int {
	n := 0
	for n < len(s) && s[n] == '_' {
		n++
	}
	return n
}

// newSymtab sorts syms and merges aliases.
func newSymtab(syms []symbol) symtab {
	sort.Slice(syms, func(i, j int) bool {
		if syms[i].addr != syms[j].addr {
			return syms[i].addr < syms[j].addr
		}
		return better(&syms[i], &syms[j])
	})
	out := syms[:0]
	for _, s := range syms {
		if n := len(out); n > 0 && out[n-1].addr == s.addr {
			// Same address: keep the best name (sorted first) and
			// the largest size any alias claims.
			if s.size > out[n-1].size {
				out[n-1].size = s.size
			}
			if s.secEnd > out[n-1].secEnd {
				out[n-1].secEnd = s.secEnd
			}
			continue
		}
		out = append(out, s)
	}
	return symtab(out[:len(out):len(out)])
}

// maxNestedScan bounds the backwards walk for a sized symbol enclosing a
// smaller one (local labels typed as functions inside assembly routines).
const maxNestedScan = 16

// lookup returns the demangled name of the function symbol containing pc.
func (t symtab) lookup(pc uint64) (string, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].addr > pc }) - 1
	if i < 0 {
		return "", false
	}
	hit := -1
	for j := i; j >= 0 && j > i-maxNestedScan; j-- {
		if t[j].size > 0 && pc-t[j].addr < t[j].size {
			hit = j
			break
		}
	}
	if hit < 0 && t[i].size == 0 && pc < t[i].secEnd {
		hit = i
	}
	if hit < 0 {
		return "", false
	}
	s := &t[hit]
	if !s.demangled {
		s.name = demangleName(s.name)
		s.demangled = true
	}
	return s.name, true
}

// ntGNUBuildID is the note type of a GNU build ID (not in debug/elf).
const ntGNUBuildID = 3

// buildID returns the hex GNU build ID note of ef, or "".
func buildID(ef *elf.File) string {
	if s := ef.Section(".note.gnu.build-id"); s != nil && s.Type == elf.SHT_NOTE {
		if data, err := s.Data(); err == nil {
			if id := findBuildID(data, ef.ByteOrder, 4); id != "" {
				return id
			}
		}
	}
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		if data, err := s.Data(); err == nil {
			if id := findBuildID(data, ef.ByteOrder, noteAlign(s.Addralign)); id != "" {
				return id
			}
		}
	}
	// Section headers can be stripped; the loader's view always has them.
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), data); err != nil {
			continue
		}
		if id := findBuildID(data, ef.ByteOrder, noteAlign(p.Align)); id != "" {
			return id
		}
	}
	return ""
}

func noteAlign(a uint64) int {
	if a == 8 {
		return 8
	}
	return 4
}

// findBuildID walks the notes in data looking for NT_GNU_BUILD_ID from "GNU".
func findBuildID(data []byte, bo interface{ Uint32([]byte) uint32 }, align int) string {
	pad := func(n int) int { return (n + align - 1) &^ (align - 1) }
	for len(data) >= 12 {
		namesz, descsz, typ := int(bo.Uint32(data)), int(bo.Uint32(data[4:])), bo.Uint32(data[8:])
		data = data[12:]
		if namesz < 0 || descsz < 0 || namesz > len(data) {
			return ""
		}
		name := data[:namesz]
		if pad(namesz) > len(data) {
			return ""
		}
		data = data[pad(namesz):]
		if descsz > len(data) {
			return ""
		}
		desc := data[:descsz]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && descsz > 0 {
			return hex.EncodeToString(desc)
		}
		if pad(descsz) > len(data) {
			return ""
		}
		data = data[pad(descsz):]
	}
	return ""
}
