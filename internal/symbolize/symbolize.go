// Package symbolize turns ELF virtual addresses of one file into
// function/file/line frames, inlined frames included, the way addr2line -i
// -f -C does, but cheaply enough to run inside the heaplens agent for every
// distinct pc of a capture.
//
// Symbols come from .symtab and .dynsym; source lines and inlined frames come
// from DWARF (versions 2 to 5), read from the file itself or from a separate
// debug file found by build ID or .gnu_debuglink under DebugRoots. DWARF is
// loaded on the first lookup that needs it, and a compilation unit is decoded
// only when a pc falls into it, so a few lookups in a large library with full
// debug info stay cheap. A Cache also keeps the results of lookups on disk
// (see DefaultCacheDir), so the next run of the same program does not load
// the same DWARF again.
//
// Malformed input never panics: Open reports an error, and Lookup falls back to
// whatever it still knows (the symbol table) or returns nil.
package symbolize

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/heaplens/heaplens/internal/capture"
)

// DebugRoots are the directories searched for separate debug files, as gdb
// does: <root>/.build-id/xx/rest.debug and <root>/<dir of file>/<debuglink>.
// Open uses it; OpenWith and Cache.DebugRoots override it.
var DebugRoots = []string{"/usr/lib/debug"}

// File is one opened ELF file, ready for lookups. A File is safe for
// concurrent use; lookups are serialised because they fill caches.
type File struct {
	path    string
	buildID string

	mu sync.Mutex
	// The symbol tables are read at the first lookup that needs them (one
	// the symbol cache does not answer): a run whose pcs are all cached
	// never reads them (a third of the agent's start-up).
	syms      symtab
	symsFrom  []*elf.File // the files to read them from, until then
	symsClose *os.File    // a file open only for them, closed then
	symsRead  bool
	dwFile    *os.File  // the file holding DWARF (the original or its debug file) until loaded; nil if none
	dwELF     *elf.File // dwFile parsed
	dwTried   bool      // loadDWARF has run
	dw        *dwarfData
	disk      *diskFile // results kept across runs (see diskcache.go); nil if none
}

// Open opens the ELF file at path and reads its build ID. Its symbol tables
// and DWARF, possibly from a separate debug file under DebugRoots, are read
// lazily by Lookup.
func Open(path string) (*File, error) {
	return OpenWith(path, DebugRoots)
}

// OpenWith is Open with an explicit list of debug roots (nil or empty: no
// separate debug files beyond those next to the file itself).
func OpenWith(path string, debugRoots []string) (f *File, err error) {
	return openWith(path, debugRoots, nil)
}

// openWith is OpenWith that asks dfd, if not nil, for a debug file no
// root holds.
func openWith(path string, debugRoots []string, dfd *DebuginfodClient) (f *File, err error) {
	if path == "" || strings.HasPrefix(path, "[") {
		// Pseudo mappings such as [vdso], [heap] or [stack] have no file.
		return nil, fmt.Errorf("symbolize: open %s: %w", path, errors.New("not a file"))
	}
	defer func() {
		// debug/elf is hardened against bad input, but a panic here must not
		// take the agent down.
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("symbolize: open %s: malformed ELF: %v", path, r)
		}
	}()
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("symbolize: open %s: %w", path, err)
	}
	ef, err := elf.NewFile(osf)
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("symbolize: open %s: %w", path, err)
	}
	f = &File{path: path, buildID: buildID(ef), symsFrom: []*elf.File{ef}}
	if hasDWARF(ef) {
		f.dwFile, f.dwELF = osf, ef
	} else {
		// The original is still needed open to read .gnu_debuglink.
		df, dosf := findDebugFile(path, ef, f.buildID, debugRoots)
		if df == nil && dfd != nil && f.buildID != "" {
			if p := dfd.fetch(f.buildID); p != "" {
				if df, dosf = openDebugFile(p, path, f.buildID, nil); df == nil {
					os.Remove(p) // not the debug file of this build ID
				}
			}
		}
		if df != nil {
			f.symsFrom = append(f.symsFrom, df)
			f.dwFile, f.dwELF = dosf, df
		}
		f.symsClose = osf
	}
	if ef.Type == elf.ET_REL {
		// Relocatable objects would need their DWARF relocated; the agent
		// only sees loaded modules, so do not pretend.
		f.readSymbols()
		f.closeDWARF()
	}
	return f, nil
}

// readSymbols reads the symbol tables, once, and closes what was open for
// them alone. The caller holds f.mu (or has f to itself).
func (f *File) readSymbols() symtab {
	if f.symsRead {
		return f.syms
	}
	f.symsRead = true
	var all []symbol
	for i, ef := range f.symsFrom {
		all = appendSymbols(all, ef)
		if i == 0 {
			all = appendMiniDebugInfo(all, ef)
		}
	}
	f.syms = newSymtab(all)
	f.dropSymbolSources()
	return f.syms
}

// dropSymbolSources forgets the files the symbol tables were to be read
// from and closes the one open for them alone.
func (f *File) dropSymbolSources() {
	f.symsFrom = nil
	if f.symsClose != nil {
		f.symsClose.Close()
		f.symsClose = nil
	}
}

// BuildID returns the hex NT_GNU_BUILD_ID of the file ("" if none). With a
// separate debug file it is still the original file's build ID.
func (f *File) BuildID() string { return f.buildID }

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Lookup returns the frames at ELF virtual address vaddr (the runtime pc minus
// the load bias; a return address minus one). Frames are innermost first, as
// pprof wants: inlined callees, then the function the code physically belongs
// to. Lookup returns nil when nothing is known about vaddr.
func (f *File) Lookup(vaddr uint64) []capture.Line {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disk != nil {
		if lines, ok := f.disk.get(vaddr); ok {
			return lines
		}
	}
	lines := f.lookup(vaddr)
	if f.disk != nil && f.dw != nil {
		// Only results computed with DWARF are kept: a file whose DWARF
		// failed to load is not worth caching, and its failure may not
		// last.
		f.disk.put(vaddr, lines)
	}
	return lines
}

func (f *File) lookup(vaddr uint64) []capture.Line {
	symName, symOK := f.readSymbols().lookup(vaddr)
	var lines []capture.Line
	if d := f.dwarf(); d != nil {
		lines = d.lookup(vaddr)
	}
	if len(lines) == 0 {
		if !symOK {
			return nil
		}
		return []capture.Line{{Function: symName}}
	}
	// The line table can know a pc that no subprogram DIE covers (assembly
	// files, compiler-generated thunks): name it from the symbol table.
	if last := &lines[len(lines)-1]; last.Function == "" && symOK {
		last.Function = symName
	}
	if len(lines) == 1 && lines[0].Function == "" && lines[0].File == "" {
		return nil
	}
	return lines
}

// Close releases the file, and saves new results to the symbol cache when
// the file came from a Cache with one. Lookups after Close use only the
// symbol table, if a lookup before read it (else they find nothing).
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disk != nil {
		f.disk.save()
		f.disk = nil
	}
	f.dwTried = true
	f.dw = nil
	f.dropSymbolSources()
	f.symsRead = true // what no lookup read is not read now: the files go
	return f.closeDWARF()
}

func (f *File) closeDWARF() error {
	var err error
	if f.dwFile != nil {
		err = f.dwFile.Close()
	}
	f.dwFile, f.dwELF = nil, nil
	return err
}

// dwarf loads the DWARF data on first use. A failure is remembered: the file
// then symbolizes from its symbol table only.
func (f *File) dwarf() *dwarfData {
	if f.dwTried {
		return f.dw
	}
	f.dwTried = true
	if f.dwELF == nil {
		return nil
	}
	var ra io.ReaderAt
	if f.dwFile != nil {
		ra = f.dwFile
	}
	d, err := loadDWARF(f.dwELF, ra)
	if err == nil {
		f.dw = d
	}
	// loadDWARF copied out everything lookups need: give back the
	// descriptor, which matters when a Cache holds hundreds of modules.
	f.closeDWARF()
	return f.dw
}

// hasDWARF reports whether ef carries its own debug info.
func hasDWARF(ef *elf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}
