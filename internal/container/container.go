// Package container reaches a process that runs in other namespaces than
// heaplens: a container seen from the host, or from a sidecar that shares
// its PID namespace but not its file system (docs/attach.md). Its files are
// read through /proc/PID/root with its own symbolic links resolved inside
// that root, never the host's file of the same path; its pids are
// translated through the NSpid lines of /proc/PID/status; and the
// directories heaplens places in its file system are private ones,
// checked as internal/privdir checks heaplens's own, and removed.
package container

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Target is a process, named by its pid as heaplens sees it, and the
// namespaces it runs in.
type Target struct {
	PID int
	// Root is the prefix that opens the process's files ("" when it sees
	// the same mounts as heaplens).
	Root string
	// NSPID is the process's pid in its own PID namespace (PID when that
	// namespace is heaplens's).
	NSPID int
	// OtherPIDs: its PID namespace is not heaplens's; heaplens's pid means
	// nothing in it.
	OtherPIDs bool

	pidNS uint64      // its PID namespace's inode
	depth int         // the index of its pid namespace in an NSpid line read here
	hosts map[int]int // its namespace's pids to heaplens's, found so far
}

// Open looks at the namespaces of pid.
func Open(pid int) (*Target, error) {
	t := &Target{PID: pid, NSPID: pid, hosts: map[int]int{}}
	mnt, err := sameNS(pid, "mnt")
	if err != nil {
		return nil, err
	}
	if !mnt {
		t.Root = fmt.Sprintf("/proc/%d/root", pid)
	}
	pids, err := sameNS(pid, "pid")
	if err != nil {
		return nil, err
	}
	if !pids {
		t.OtherPIDs = true
		if t.pidNS, err = nsInode(pid, "pid"); err != nil {
			return nil, err
		}
		ns, err := nsPIDs(pid)
		if err != nil || len(ns) == 0 {
			return nil, fmt.Errorf("process %d: no NSpid in /proc/%d/status: %v", pid, pid, err)
		}
		t.depth, t.NSPID = len(ns)-1, ns[len(ns)-1]
		t.hosts[t.NSPID] = pid
	}
	return t, nil
}

// Foreign reports whether the process sees other files or other pids than heaplens.
func (t *Target) Foreign() bool { return t.Root != "" || t.OtherPIDs }

// Where says, for messages, where the process runs, "" if beside heaplens.
func (t *Target) Where() string {
	switch {
	case t.Root != "" && t.OtherPIDs:
		return "in another mount and PID namespace (a container)"
	case t.Root != "":
		return "in another mount namespace (a container sharing heaplens's PID namespace)"
	case t.OtherPIDs:
		return "in another PID namespace"
	}
	return ""
}

func sameNS(pid int, kind string) (bool, error) {
	mine, err1 := nsInode(os.Getpid(), kind)
	theirs, err2 := nsInode(pid, kind)
	if err2 != nil {
		return false, fmt.Errorf("process %d: its %s namespace: %w", pid, kind, err2)
	}
	return err1 == nil && mine == theirs, nil
}

func nsInode(pid int, kind string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// nsPIDs is the NSpid line of pid: its pid in heaplens's namespace first,
// in its own last.
func nsPIDs(pid int) ([]int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "NSpid:")
		if !ok {
			continue
		}
		var out []int
		for _, s := range strings.Fields(v) {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("NSpid %q", v)
			}
			out = append(out, n)
		}
		return out, nil
	}
	return nil, sc.Err()
}

// HostPID returns heaplens's pid of the process that is nspid in the
// target's PID namespace, 0 if there is none (it has exited).
func (t *Target) HostPID(nspid int) int {
	if !t.OtherPIDs {
		return nspid
	}
	if nspid <= 0 {
		return 0
	}
	if h, ok := t.hosts[nspid]; ok && t.is(h, nspid) {
		return h
	}
	delete(t.hosts, nspid)
	// One pass over /proc notes every process of the namespace: a fork
	// storm's children are then found without a pass each.
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		h, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ino, err := nsInode(h, "pid"); err != nil || ino != t.pidNS {
			continue
		}
		if ns, err := nsPIDs(h); err == nil && len(ns) > t.depth {
			t.hosts[ns[t.depth]] = h
		}
	}
	return t.hosts[nspid]
}

// is reports whether host is still nspid in the target's namespace (a pid
// may have been reused).
func (t *Target) is(host, nspid int) bool {
	if ino, err := nsInode(host, "pid"); err != nil || ino != t.pidNS {
		return false
	}
	ns, err := nsPIDs(host)
	return err == nil && len(ns) > t.depth && ns[t.depth] == nspid
}

// maxLinks bounds the symbolic links followed in one path, as the kernel's 40.
const maxLinks = 40

// Path returns the name under which heaplens opens the process's file p
// (absolute, as the process names it): p itself beside heaplens, else p
// under Root with every symbolic link on the way resolved inside that
// root, so that an absolute link never leads to the host's file.
func (t *Target) Path(p string) string {
	if t.Root == "" || !strings.HasPrefix(p, "/") {
		return p
	}
	r, err := resolveIn(t.Root, p)
	if err != nil {
		return t.Root + path.Clean(p) // the open fails, or finds what is there
	}
	return t.Root + r
}

// resolveIn resolves the symbolic links of p inside root, as the process
// whose root it is would.
func resolveIn(root, p string) (string, error) {
	done := "/"
	rest := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, c)
		target, err := os.Readlink(root + next)
		if err != nil {
			done = next // not a link (or missing: the open says so)
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many symbolic links", p)
		}
		if strings.HasPrefix(target, "/") {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return done, nil
}

// ClockOffset is the process's CLOCK_MONOTONIC less heaplens's: the
// difference of their time namespaces' offsets (0 without time namespaces).
func (t *Target) ClockOffset() time.Duration {
	return monotonicOffset(t.PID) - monotonicOffset(os.Getpid())
}

// monotonicOffset reads the monotonic line of /proc/PID/timens_offsets
// ("monotonic SECONDS NANOSECONDS"), 0 if there is none.
func monotonicOffset(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timens_offsets", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "monotonic" || f[0] == "1") {
			s, err1 := strconv.ParseInt(f[1], 10, 64)
			ns, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil {
				return time.Duration(s)*time.Second + time.Duration(ns)
			}
		}
	}
	return 0
}
