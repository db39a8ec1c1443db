package attach

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// checkKernelAllows asks the kernel whether heaplens may trace pid:
// opening /proc/PID/mem for writing goes through the checks of a ptrace
// attach (credentials, CAP_SYS_PTRACE in the process's user namespace,
// dumpability, Yama and other security modules). When it refuses, the
// reason is found and named.
func checkKernelAllows(pid int, st map[string]string) error {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return nil
	}
	if !errors.Is(err, fs.ErrPermission) {
		return nil // gone meanwhile, or another trouble the attach itself reports
	}
	return whyRefused(pid, st)
}

// capSysPtrace is CAP_SYS_PTRACE's bit in the CapEff mask.
const capSysPtrace = 19

// whyRefused names why the kernel refuses heaplens the right to trace pid,
// mirroring the kernel's ptrace access check (kernel/ptrace.c): the same
// user, or CAP_SYS_PTRACE in the process's user namespace; a dumpable
// process; then the security modules.
func whyRefused(pid int, st map[string]string) error {
	sameUser := true
	me := strconv.Itoa(os.Geteuid())
	for _, u := range strings.Fields(st["Uid"]) {
		sameUser = sameUser && u == me
	}
	capable, where := capableIn(pid)
	switch {
	case !sameUser && !capable && where != "":
		return fmt.Errorf("process %d runs in %s, where heaplens (uid %s here) has no CAP_SYS_PTRACE: run heaplens attach as the process's user, or as root in a user namespace at or above the process's (on the host, for a rootless container)", pid, where, me)
	case !sameUser && !capable:
		return fmt.Errorf("process %d runs as user %s, and heaplens (uid %s) has no CAP_SYS_PTRACE: run heaplens attach as that user, or as root", pid, firstField(st["Uid"]), me)
	}
	var proc unix.Stat_t
	// /proc/PID belongs to root when the process is not dumpable.
	if unix.Stat(fmt.Sprintf("/proc/%d", pid), &proc) == nil && strconv.Itoa(int(proc.Uid)) != firstField(st["Uid"]) && !capable {
		return fmt.Errorf("process %d is not dumpable (a set-user-ID program, or prctl(PR_SET_DUMPABLE, 0)): only a heaplens with CAP_SYS_PTRACE in its user namespace may attach", pid)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) != "0" {
		return fmt.Errorf("kernel.yama.ptrace_scope = %s refuses heaplens the right to trace process %d: run heaplens attach as root (with CAP_SYS_PTRACE) in the process's user namespace or above it, or `sysctl kernel.yama.ptrace_scope=0`", strings.TrimSpace(string(b)), pid)
	}
	return fmt.Errorf("the kernel refuses heaplens the right to trace process %d though it runs as its user or with CAP_SYS_PTRACE: a security module (AppArmor, SELinux) forbids ptrace here", pid)
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// capableIn reports whether heaplens has CAP_SYS_PTRACE in the user
// namespace of pid, and names that namespace when it is not heaplens's own:
// heaplens has its capabilities in its own namespace and those below it,
// and every capability in those its user created; none in others.
func capableIn(pid int) (capable bool, where string) {
	mine, err := unix.Open("/proc/self/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, ""
	}
	defer unix.Close(mine)
	var self unix.Stat_t
	unix.Fstat(mine, &self)
	have := capEff()&(1<<capSysPtrace) != 0
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil { // the kernel shows it only to who may trace the process
		if !initialUserNS() {
			return false, "a user namespace above heaplens's (heaplens runs in a container's, rootless: its root is no root outside)"
		}
		return false, "a user namespace heaplens may not look into"
	}
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	if st.Ino == self.Ino && st.Dev == self.Dev {
		unix.Close(fd)
		return have, ""
	}
	// Up from the process's namespace: heaplens's is above it when the walk
	// meets it (the kernel refuses to go above heaplens's own: EPERM).
	owned := false
	for depth := 0; depth < 64; depth++ {
		uid, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
		parent, perr := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if perr != nil {
			return false, "another user namespace (a container's), not below heaplens's"
		}
		fd = parent
		unix.Fstat(fd, &st)
		if st.Ino == self.Ino && st.Dev == self.Dev {
			owned = owned || (err == nil && int(uid) == os.Geteuid())
			unix.Close(fd)
			if have || owned {
				return true, ""
			}
			return false, "a user namespace below heaplens's that another user created"
		}
	}
	unix.Close(fd)
	return false, "a user namespace nested too deeply to follow"
}

// initialUserNS reports whether heaplens runs in the initial user
// namespace, whose uid_map maps every uid to itself.
func initialUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	return err == nil && strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

// capEff is heaplens's effective capability mask.
func capEff() uint64 {
	st, err := readStatus(os.Getpid())
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(st["CapEff"], 16, 64)
	return v
}
