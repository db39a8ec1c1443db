package launch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
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
	// rounds counts the consecutive rounds an image was seen unprofiled;
	// -1 once it has been reported.
	rounds map[image]int
}

// image is one program image of a process: an exec keeps the pid and the
// start time but changes the executable.
type image struct {
	pid   int
	start string
	exe   string
}

func newUnprofiled(root int, lib string) *unprofiled {
	return &unprofiled{root: root, lib: lib, rounds: map[image]int{}}
}

// scan looks at every process of the tree and returns a note for each image
// seen without a ring for two rounds in a row, and the pids among those
// whose ring belongs to an image they exec'd away from. profiled maps the
// pids that have a ring to the executable of their newest image.
func (u *unprofiled) scan(profiled map[int]string) (notes []string, execd []int) {
	now := map[image]bool{}
	for _, p := range descendants(u.root) {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.pid))
		if err != nil || profiled[p.pid] == exe {
			continue // gone, a zombie, or profiled
		}
		im := image{p.pid, p.start, exe}
		now[im] = true
		n := u.rounds[im]
		if n < 0 {
			continue
		}
		if n++; n < 2 {
			u.rounds[im] = n
			continue
		}
		u.rounds[im] = -1
		notes = append(notes, fmt.Sprintf("pid %d (%s) ran unprofiled: %s", p.pid, exe, whyUnprofiled(p.pid, u.lib)))
		if _, ok := profiled[p.pid]; ok {
			execd = append(execd, p.pid)
		}
	}
	for im, n := range u.rounds {
		if n >= 0 && !now[im] {
			delete(u.rounds, im) // it got its ring, or ended before it counted
		}
	}
	return notes, execd
}

type proc struct {
	pid   int
	start string // field 22 of /proc/PID/stat, clock ticks since boot
}

// descendants returns root and every process below it.
func descendants(root int) []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]proc{}
	var self *proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		p := proc{pid, f[19]}
		if pid == root {
			self = &p
		}
		children[ppid] = append(children[ppid], p)
	}
	if self == nil {
		return nil
	}
	out := []proc{*self}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].pid]...)
	}
	return out
}

// whyUnprofiled says why the library is not in process pid, as far as the
// program file, the process's environment and its mappings tell.
func whyUnprofiled(pid int, lib string) string {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	if err := CheckDynamic(exe); errors.Is(err, ErrStatic) {
		return "it is statically linked, and LD_PRELOAD cannot reach its allocator"
	}
	if st, err := os.Stat(exe); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		return "it is a set-user-ID or set-group-ID program, for which the loader ignores LD_PRELOAD"
	}
	if _, err := unix.Getxattr(exe, "security.capability", nil); err == nil {
		return "it has file capabilities, for which the loader ignores LD_PRELOAD"
	}
	if maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil && bytes.Contains(maps, []byte(lib)) {
		if uid := processUID(pid); uid >= 0 && uid != os.Getuid() {
			return fmt.Sprintf("it loaded the library but runs as uid %d, which cannot write heaplens's rings", uid)
		}
		return "it loaded the library but created no ring"
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err == nil && !bytes.Contains(env, []byte(lib)) {
		return "its environment does not pass on heaplens's LD_PRELOAD (cleared by env -i, sudo or the program)"
	}
	return "the library did not load, for a reason heaplens cannot see"
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
