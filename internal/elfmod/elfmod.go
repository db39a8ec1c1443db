// Package elfmod finds the ELF modules loaded in another process (from its
// memory map) and reads from their files what heaplens attach needs: where
// a dynamic symbol is, and which GOT entries name a symbol.
package elfmod

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/heaplens/heaplens/internal/procmaps"
	"golang.org/x/sys/unix"
)

// Module is one loaded object: the file mapped at offset 0 at First, and
// every mapping of the same file that follows it.
type Module struct {
	Path       string
	Dev, Inode uint64
	First      uint64 // the mapping of file offset 0 starts here...
	FirstEnd   uint64 // ...and ends here
	Lo, Hi     uint64 // all its mappings
}

// Loaded returns the modules in a memory map, in address order. A file
// mapped twice (two loads, or data mappings) gives a module per offset-0
// mapping.
func Loaded(maps []procmaps.Mapping) []Module {
	var out []Module
	for _, m := range maps {
		if !m.File() {
			continue
		}
		if m.Offset == 0 {
			out = append(out, Module{Path: m.Path, Dev: m.Dev, Inode: m.Inode, First: m.Start, FirstEnd: m.End, Lo: m.Start, Hi: m.End})
			continue
		}
		if n := len(out); n > 0 && out[n-1].Inode == m.Inode && out[n-1].Dev == m.Dev && m.Start >= out[n-1].Hi {
			out[n-1].Hi = m.End
		}
	}
	// The zero-filled part of .bss follows as anonymous memory: not ours to track.
	return out
}

// Base is the file name without a "(deleted)" mark.
func (m Module) Base() string { return filepath.Base(strings.TrimSuffix(m.Path, " (deleted)")) }

// File is a module's ELF file, opened as the process sees it.
type File struct {
	*elf.File
	f    *os.File
	Bias uint64 // load address - ELF virtual address
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// maxFile bounds the ELF files parsed (the largest shared libraries are a few hundred MB).
const maxFile = 2 << 30

// Open opens the module's file through the process's own view of the file
// system (map_files when allowed, else its root), checks that it is the
// very file mapped (device and inode), and finds the load bias.
func (m Module) Open(pid int) (*File, error) {
	paths := []string{
		fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.First, m.FirstEnd),
		fmt.Sprintf("/proc/%d/root%s", pid, strings.TrimSuffix(m.Path, " (deleted)")),
	}
	var err error
	for _, p := range paths {
		var f *os.File
		if f, err = os.Open(p); err != nil {
			continue
		}
		var st unix.Stat_t
		if err = unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != m.Inode || uint64(unix.Major(st.Dev))<<32|uint64(unix.Minor(st.Dev)) != m.Dev {
			f.Close()
			if err == nil {
				err = fmt.Errorf("%s: not the file mapped (it changed on disk)", m.Path)
			}
			continue
		}
		if st.Size > maxFile {
			f.Close()
			return nil, fmt.Errorf("%s: %d bytes, too large to read", m.Path, st.Size)
		}
		out, err := newFile(f, m)
		if err != nil {
			f.Close()
			return nil, err
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: %w", m.Path, err)
}

// OpenCopy opens path, a copy of the module's file that heaplens holds
// itself (the library heaplens attach placed in a container and removed
// once loaded: without CAP_SYS_ADMIN, map_files does not open it), and
// finds the load bias as Open does. The caller vouches for the content.
func (m Module) OpenCopy(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	out, err := newFile(f, m)
	if err != nil {
		f.Close()
		return nil, err
	}
	return out, nil
}

// newFile parses the module's file. The file is the process's: a
// malformed one is an error, never a panic of the parser.
func newFile(f *os.File, m Module) (out *File, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%s: malformed ELF file (%v)", m.Path, r)
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	out = &File{File: ef, f: f}
	if err := out.findBias(m); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *File) findBias(m Module) error {
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%s: not an x86-64 ELF file", m.Path)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			f.Bias = m.First - p.Vaddr&^(pageSize-1)
			if f.Type == elf.ET_EXEC && f.Bias != 0 {
				return fmt.Errorf("%s: a fixed-address executable mapped at %#x", m.Path, m.First)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: no segment maps the start of the file", m.Path)
}

const pageSize = 4096

// Symbols returns the load addresses of the named functions and objects
// this module defines in its dynamic symbol table (the first of several
// versions).
func (f *File) Symbols(names ...string) (out map[string]uint64) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out = map[string]uint64{}
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if !want[s.Name] || s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		if _, ok := out[s.Name]; !ok {
			out[s.Name] = s.Value + f.Bias
		}
	}
	return out
}

// Slot is a GOT entry that the loader filled with a symbol's address.
type Slot struct {
	Name string
	Addr uint64 // in the process
	Lazy bool   // a PLT entry (JUMP_SLOT), which may still hold the address of its own stub
}

// maxRelocs bounds the relocations read per table.
const maxRelocs = 1 << 24

// Slots returns the GOT entries of this module that name one of names:
// JUMP_SLOT and GLOB_DAT relocations, read through the dynamic section.
func (f *File) Slots(names map[string]bool) (out []Slot, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("malformed ELF file (%v)", r)
		}
	}()
	syms, err := f.DynamicSymbols()
	if err != nil {
		if errors.Is(err, elf.ErrNoSymbols) {
			return nil, nil
		}
		return nil, err
	}
	for _, t := range [][2]elf.DynTag{{elf.DT_JMPREL, elf.DT_PLTRELSZ}, {elf.DT_RELA, elf.DT_RELASZ}} {
		at, err1 := f.DynValue(t[0])
		size, err2 := f.DynValue(t[1])
		if err1 != nil || err2 != nil || len(at) == 0 || len(size) == 0 || size[0] == 0 {
			continue
		}
		if size[0]%24 != 0 || size[0]/24 > maxRelocs {
			return nil, fmt.Errorf("relocation table of %d bytes", size[0])
		}
		b, err := f.readVaddr(at[0], size[0])
		if err != nil {
			return nil, err
		}
		for i := 0; i+24 <= len(b); i += 24 {
			off := binary.LittleEndian.Uint64(b[i:])
			info := binary.LittleEndian.Uint64(b[i+8:])
			typ, sym := elf.R_X86_64(info&0xffffffff), info>>32
			if (typ != elf.R_X86_64_JMP_SLOT && typ != elf.R_X86_64_GLOB_DAT) || sym == 0 || sym > uint64(len(syms)) {
				continue
			}
			if name := syms[sym-1].Name; names[name] {
				out = append(out, Slot{Name: name, Addr: off + f.Bias, Lazy: typ == elf.R_X86_64_JMP_SLOT})
			}
		}
	}
	return out, nil
}

// readVaddr reads n bytes at ELF virtual address v from the segment holding them.
func (f *File) readVaddr(v, n uint64) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && v >= p.Vaddr && v-p.Vaddr <= p.Filesz && n <= p.Filesz-(v-p.Vaddr) {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(v-p.Vaddr)); err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("no segment holds %d bytes at %#x", n, v)
}
