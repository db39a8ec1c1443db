package launch

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// unprofiled finds the processes of the profiled tree that run without the
// library (a static binary, a set-user-ID program, a child whose
// environment lost LD_PRELOAD, …), so that the report names each one and
// why, instead of staying silent about it. It looks at /proc every RSS
// round; a process that lives less than two rounds is not seen.
type unprofiled struct {
	root int
	lib  string
	dir  string // the rings' directory, which HEAPLENS_DIR names
	// rounds counts the consecutive rounds an image was seen unprofiled;
	// -1 once it has been reported.
	rounds map[image]int
	// member remembers, by pid, whether a process is in the tree: a
	// process outside it never enters it (reparenting moves processes up,
	// to a subreaper or init), so each pid's stat is read once, not every
	// round. Forgotten every fullEvery rounds, in case a pid was reused.
	member map[int]bool
	scans  int
	self   string // heaplens's own executable: a test runner's heaplens window is a tool, not the program
	// foreign caches, by executable, whether it cannot run natively on
	// heaplens's machine (emulator).
	foreign map[string]bool
}

// emulator reports whether exe, the /proc/PID/exe of a process with a
// ring, is a program that cannot run natively on heaplens's machine (an
// x86-64 program seen by an arm64 heaplens): then heaplens, the process
// and exe all run under qemu-user (as in the arm64 root), and exe is the
// emulator. A process that execs a 32-bit program of the machine (i386 on
// x86-64) is not one. An emulated process that execs another emulated
// program without the library is not named unprofiled (/proc shows the
// same emulator).
func (u *unprofiled) emulator(pid int, exe string) bool {
	f, ok := u.foreign[exe]
	if !ok {
		// Through /proc: in a chroot the emulator's path is the host's.
		if ef, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
			n := native[runtime.GOARCH]
			f = n != [2]elf.Machine{} && ef.Machine != n[0] && ef.Machine != n[1]
			ef.Close()
		}
		if u.foreign == nil {
			u.foreign = map[string]bool{}
		}
		u.foreign[exe] = f
	}
	return f
}

// native are the ELF machines of the programs each GOARCH heaplens is
// built for runs natively: its own, and its 32-bit one.
var native = map[string][2]elf.Machine{"amd64": {elf.EM_X86_64, elf.EM_386}, "arm64": {elf.EM_AARCH64, elf.EM_ARM}}

// fullEvery is how many rounds pass between full reads of /proc.
const fullEvery = 50

// image is one program image of a process: an exec keeps the pid but
// changes the executable.
type image struct {
	pid int
	exe string
}

func newUnprofiled(root int, lib, dir string) *unprofiled {
	self, _ := os.Executable()
	return &unprofiled{root: root, lib: lib, dir: dir, rounds: map[image]int{}, self: self}
}

// scan looks at every process of the tree and returns a note for each image
// seen without a ring for two rounds in a row, and the pids among those
// whose ring belongs to an image they exec'd away from. profiled maps the
// pids that have a ring to the executable of their newest image; marked
// holds those that said themselves why they have none.
func (u *unprofiled) scan(profiled map[int]string, marked map[int]bool) (notes []string, execd []int) {
	now := map[image]bool{}
	for _, pid := range u.tree() {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || profiled[pid] == exe || exe == u.self || marked[pid] {
			continue // gone, a zombie, profiled, heaplens itself, or it said why not
		}
		if _, ok := profiled[pid]; ok && u.emulator(pid, exe) {
			continue // profiled, seen through qemu-user: its ring names the program, /proc the emulator
		}
		im := image{pid, exe}
		now[im] = true
		n := u.rounds[im]
		if n < 0 {
			continue
		}
		if n++; n < 2 {
			u.rounds[im] = n
			continue
		}
		why, loaded := whyUnprofiled(pid, u.lib, u.dir)
		if loaded && n < 10 { // the library is in: its ring may just be late on a loaded machine
			u.rounds[im] = n
			continue
		}
		u.rounds[im] = -1
		notes = append(notes, fmt.Sprintf("pid %d (%s) ran unprofiled: %s", pid, exe, why))
		if _, ok := profiled[pid]; ok {
			execd = append(execd, pid)
		}
	}
	for im, n := range u.rounds {
		if n >= 0 && !now[im] {
			delete(u.rounds, im) // it got its ring, or ended before it counted
		}
	}
	return notes, execd
}

// tree returns the pids of the root and of every process below it, or
// below heaplens itself (orphans of the tree come to heaplens when it is
// a subreaper).
func (u *unprofiled) tree() []int {
	if u.scans++; u.member == nil || u.scans%fullEvery == 0 {
		u.member = map[int]bool{u.root: true, os.Getpid(): false}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	fresh := map[int]int{} // pid -> ppid, for pids not seen before
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if in, ok := u.member[pid]; ok {
			if in {
				out = append(out, pid)
			}
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			fresh[pid] = ppid
		}
	}
	// A new process's parent may be new too: settle membership from the
	// known ones outward.
	for changed := true; changed; {
		changed = false
		for pid, ppid := range fresh {
			in, ok := u.member[ppid]
			if !ok {
				continue
			}
			u.member[pid] = in || ppid == os.Getpid()
			if u.member[pid] {
				out = append(out, pid)
			}
			delete(fresh, pid)
			changed = true
		}
	}
	for pid := range fresh { // parents gone or outside: not ours
		u.member[pid] = false
	}
	return out
}

// parentOf reads the parent pid from /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// whyUnprofiled says why the library is not in process pid, as far as the
// program file, the process's environment and its mappings tell; loaded
// when the library is mapped in it (it runs, without a ring). dir is the
// rings' directory.
func whyUnprofiled(pid int, lib, dir string) (why string, loaded bool) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	if err := CheckDynamic(exe); errors.Is(err, ErrStatic) {
		return "it is statically linked, and LD_PRELOAD cannot reach its allocator", false
	}
	if why := notLoadable(exe, libraryBytes(), 0); why != "" {
		return why, false
	}
	if st, err := os.Stat(exe); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		return "it is a set-user-ID or set-group-ID program, for which the loader ignores LD_PRELOAD", false
	}
	if _, err := unix.Getxattr(exe, "security.capability", nil); err == nil {
		return "it has file capabilities, for which the loader ignores LD_PRELOAD", false
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	// Under the program's filter the library makes no system call it had
	// not made, so no ring; a process that set the filter also leaves the
	// library out of what it execs (preload/seccomp.c).
	if seccompFiltered(pid) {
		return "it runs under a seccomp filter (the program's, installed before this process or image began), " +
			"under which the library makes no system call it had not made, so no ring", false
	}
	if maps, merr := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); merr == nil && bytes.Contains(maps, []byte(lib)) {
		if uid := processUID(pid); uid >= 0 && uid != os.Getuid() {
			return fmt.Sprintf("it loaded the library but runs as uid %d, which cannot write heaplens's rings", uid), true
		}
		// The environment it started with (a program that retitles itself
		// writes over it later, which matters not: the library copied its
		// settings at start). Without the setting no ring can come: no
		// waiting for a late one (false).
		if err == nil && !bytes.Contains(env, []byte("\x00HEAPLENS_DIR="+dir+"\x00")) && !bytes.HasPrefix(env, []byte("HEAPLENS_DIR="+dir+"\x00")) {
			return "its environment kept heaplens's LD_PRELOAD but lost its settings (HEAPLENS_DIR, cleared by the program or a parent), " +
				"so the library had nowhere to write", false
		}
		return "it loaded the library but created no ring", true
	}
	// The preload entry names the library's directory through $PLATFORM.
	if err == nil && !bytes.Contains(env, []byte(filepath.Base(lib))) {
		return "its environment does not pass on heaplens's LD_PRELOAD (cleared by env -i, sudo or the program)", false
	}
	return "the library did not load, for a reason heaplens cannot see", false
}

// seccompFiltered reports whether pid runs under more seccomp filters
// than heaplens (a container's), or in strict mode.
func seccompFiltered(pid int) bool {
	mode, filters, ok := seccompOf(strconv.Itoa(pid))
	if !ok || mode == "0" {
		return false
	}
	self, selfFilters, _ := seccompOf("self")
	return mode != self || filters != selfFilters
}

// seccompOf reads the Seccomp and Seccomp_filters lines of /proc/PID/status
// ("" for a line the kernel does not write).
func seccompOf(pid string) (mode, filters string, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			switch f[0] {
			case "Seccomp:":
				mode, ok = f[1], true
			case "Seccomp_filters:":
				filters = f[1]
			}
		}
	}
	return mode, filters, ok
}

// processUID returns the real uid of pid, -1 if unknown.
func processUID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			if err == nil {
				return uid
			}
		}
	}
	return -1
}
