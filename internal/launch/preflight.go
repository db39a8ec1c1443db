package launch

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Before preloading, the agent checks what it can of whether the library
// will load into the program: a loader that cannot load it either prints
// an error into the program's standard error (another architecture) or
// refuses to start the program (musl's loader, a missing symbol version).
// What only the exec of a child decides is handled by the preload entry's
// $PLATFORM (preloadEntry) and named afterwards by whyUnprofiled.

// preflight says why the library at lib (its bytes lb) would not load into
// the program at path, or "" when nothing says it would not. It blocks only
// on evidence: a layout it does not know is trusted.
func preflight(path, lib string, lb []byte) string {
	if why := notLoadable(path, lb, 0); why != "" {
		return why
	}
	if noexec(filepath.Dir(lib)) {
		return fmt.Sprintf("the library's directory %s is on a noexec mount, where the loader cannot map it (set TMPDIR or XDG_CACHE_HOME to another file system)", filepath.Dir(lib))
	}
	return ""
}

// notLoadable is preflight's look at the program file, following #! to
// the interpreter a script runs under.
func notLoadable(path string, lb []byte, depth int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := f.ReadAt(head, 0)
	head = head[:n]
	if bytes.HasPrefix(head, []byte("#!")) {
		interp := scriptInterpreter(head)
		if interp == "" || depth > 3 {
			return ""
		}
		why := notLoadable(interp, lb, depth+1)
		if why != "" && depth == 0 {
			why = fmt.Sprintf("its interpreter %s: %s", interp, why)
		}
		return why
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	le, err := elf.NewFile(bytes.NewReader(lb))
	if err != nil {
		return ""
	}
	if ef.Class != le.Class || ef.Machine != le.Machine {
		return fmt.Sprintf("it is a %s program for %s, and the library is %s for %s", bits(ef.Class), machine(ef.Machine), bits(le.Class), machine(le.Machine))
	}
	interp := programInterpreter(ef)
	if interp == "" {
		return "" // static: Run says so
	}
	if strings.Contains(filepath.Base(interp), "musl") {
		return fmt.Sprintf("it runs under musl's loader (%s), which cannot load a library built for glibc", interp)
	}
	return missingVersions(interp, le)
}

// scriptInterpreter returns the program a #! line runs, resolving
// `/usr/bin/env NAME` in PATH as env would.
func scriptInterpreter(head []byte) string {
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return ""
	}
	if filepath.Base(fields[0]) != "env" {
		return fields[0]
	}
	for _, a := range fields[1:] {
		if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
			continue
		}
		p, err := exec.LookPath(a)
		if err != nil {
			return ""
		}
		return p
	}
	return ""
}

func programInterpreter(ef *elf.File) string {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return ""
			}
			return string(bytes.TrimRight(b, "\x00"))
		}
	}
	return ""
}

// missingVersions says which symbol versions the library needs that the
// C library beside the program's loader does not define (a glibc older
// than the library allows), or "".
func missingVersions(interp string, lib *elf.File) string {
	needs, err := lib.DynamicVersionNeeds()
	if err != nil {
		return ""
	}
	real, err := filepath.EvalSymlinks(interp)
	if err != nil {
		return "" // the kernel will say what is wrong
	}
	dirs := []string{filepath.Dir(real), "/lib64", "/usr/lib64", "/lib/" + multiarch, "/usr/lib/" + multiarch}
	for _, need := range needs {
		if need.Name == "libgcc_s.so.1" {
			continue // found through the program's own paths as often as the system's
		}
		defined, where := versionsOf(need.Name, dirs)
		if defined == nil {
			continue
		}
		for _, v := range need.Needs {
			if !defined[v.Dep] {
				return fmt.Sprintf("its C library (%s) has no %s, which the library needs: that glibc is too old", where, v.Dep)
			}
		}
	}
	return ""
}

// versionsOf returns the versions the first soname found in dirs defines.
func versionsOf(soname string, dirs []string) (map[string]bool, string) {
	for _, d := range dirs {
		p := filepath.Join(d, soname)
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		defs, err := f.DynamicVersions()
		f.Close()
		if err != nil || len(defs) == 0 {
			return nil, ""
		}
		m := map[string]bool{}
		for _, d := range defs {
			m[d.Name] = true
		}
		return m, p
	}
	return nil, ""
}

func bits(c elf.Class) string {
	if c == elf.ELFCLASS32 {
		return "32-bit"
	}
	return "64-bit"
}

func machine(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "x86-64"
	case elf.EM_386:
		return "i386"
	case elf.EM_AARCH64:
		return "arm64"
	}
	return strings.TrimPrefix(m.String(), "EM_")
}

// noexec reports whether dir is on a file system mounted noexec.
func noexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}

// The preload entry names the library through the loader's $PLATFORM:
// glibc's 64-bit loader expands it to x86_64 (haswell or xeon_phi on
// glibc 2.26–2.36 on such CPUs), links to the library's own directory; a
// 32-bit glibc loader expands it to i686, where a do-nothing 32-bit
// library of the same name lets it go on without a word; musl's loader
// does not expand it, finds no such file and goes on silently. So a child
// that execs a program the library cannot load into runs unprofiled with
// its output untouched (whyUnprofiled names it). On arm64 the loader
// expands it to aarch64; no 32-bit stub is made there (a 32-bit ARM
// program's loader prints that it cannot find the library, and goes on).
var platformLinks, multiarch = func() ([]string, string) {
	if runtime.GOARCH == "arm64" {
		return []string{"aarch64"}, "aarch64-linux-gnu"
	}
	return []string{"x86_64", "haswell", "xeon_phi"}, "x86_64-linux-gnu"
}()

const stubPlatform = "i686"

// preloadEntry returns the LD_PRELOAD entry for lib, preparing the
// platform names in its directory; lib itself when that cannot be done.
func preloadEntry(lib string) string {
	dir, name := filepath.Split(lib)
	for _, l := range platformLinks {
		// Made once and never replaced: another heaplens may be starting
		// a program through it right now.
		p := filepath.Join(dir, l)
		if t, err := os.Readlink(p); err == nil && t == "." {
			continue
		}
		os.Symlink(".", p)
		if t, err := os.Readlink(p); err != nil || t != "." {
			return lib
		}
	}
	if runtime.GOARCH != "amd64" {
		return filepath.Join(dir, "$PLATFORM", name)
	}
	sd := filepath.Join(dir, stubPlatform)
	os.Mkdir(sd, 0o711)
	if fi, err := os.Lstat(sd); err != nil || !fi.IsDir() {
		return lib
	}
	stub := filepath.Join(sd, name)
	if b, err := os.ReadFile(stub); err != nil || !bytes.Equal(b, stub32) {
		tmp, err := os.CreateTemp(sd, name+".tmp*")
		if err != nil {
			return lib
		}
		_, err = tmp.Write(stub32)
		if err == nil {
			err = tmp.Chmod(0o755)
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), stub) // whole or not at all, for a loader reading it now
		}
		if err != nil {
			os.Remove(tmp.Name())
			return lib
		}
	}
	return filepath.Join(dir, "$PLATFORM", name)
}

// stub32 is the smallest i386 shared object glibc's loader takes: one
// writable load segment (the loader relocates the dynamic section in
// place), a dynamic section with an empty symbol table, and PT_GNU_STACK,
// whose absence would make the loader give the process an executable stack.
var stub32 = func() []byte {
	const (
		phoff   = 52
		dynOff  = phoff + 3*32
		hashOff = dynOff + 6*8
		symOff  = hashOff + 16
		strOff  = symOff + 16
		size    = strOff + 4
	)
	var b bytes.Buffer
	w := func(v ...any) {
		for _, x := range v {
			binary.Write(&b, binary.LittleEndian, x)
		}
	}
	b.Write([]byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	w(uint16(elf.ET_DYN), uint16(elf.EM_386), uint32(1), uint32(0), uint32(phoff), uint32(0), uint32(0),
		uint16(52), uint16(32), uint16(3), uint16(40), uint16(0), uint16(0))
	rw := uint32(elf.PF_R | elf.PF_W)
	w(uint32(elf.PT_LOAD), uint32(0), uint32(0), uint32(0), uint32(size), uint32(size), rw, uint32(0x1000))
	w(uint32(elf.PT_DYNAMIC), uint32(dynOff), uint32(dynOff), uint32(dynOff), uint32(6*8), uint32(6*8), rw, uint32(4))
	w(uint32(elf.PT_GNU_STACK), uint32(0), uint32(0), uint32(0), uint32(0), uint32(0), rw, uint32(16))
	w(uint32(elf.DT_HASH), uint32(hashOff), uint32(elf.DT_STRTAB), uint32(strOff), uint32(elf.DT_SYMTAB), uint32(symOff),
		uint32(elf.DT_STRSZ), uint32(1), uint32(elf.DT_SYMENT), uint32(16), uint32(elf.DT_NULL), uint32(0))
	w(uint32(1), uint32(1), uint32(0), uint32(0)) // hash: one bucket, one chain, both the null symbol
	b.Write(make([]byte, 16))                     // the null symbol
	b.Write(make([]byte, 4))                      // the string table: ""
	return b.Bytes()
}()
