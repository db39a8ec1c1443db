package attach

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/internal/elfmod"
	"github.com/heaplens/heaplens/internal/inject"
	"github.com/heaplens/heaplens/internal/procmaps"
)

// Check says, in words a user can act on, why pid cannot be attached to.
// It changes nothing in the process.
func Check(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%d is not a process id", pid)
	}
	if pid == os.Getpid() {
		return fmt.Errorf("heaplens cannot attach to itself")
	}
	if runtime.GOARCH != "amd64" {
		return inject.ErrArch
	}
	state, err := procState(pid)
	if err != nil {
		return fmt.Errorf("no process %d", pid)
	}
	switch state {
	case 'Z', 'X':
		return fmt.Errorf("process %d has exited (a zombie)", pid)
	case 'T', 't':
		return fmt.Errorf("process %d is stopped (SIGSTOP or a debugger): continue it first", pid)
	}
	st, err := readStatus(pid)
	if err != nil {
		return err
	}
	if t := st["TracerPid"]; t != "" && t != "0" {
		return fmt.Errorf("process %d is being traced by process %s (a debugger?): heaplens attach needs ptrace too", pid, t)
	}
	if st["Seccomp"] == "1" {
		return fmt.Errorf("process %d runs in seccomp's strict mode (read, write, exit and sigreturn only): heaplens attach cannot load a library into it", pid)
	}
	if err := checkPtraceAllowed(pid, st); err != nil {
		return err
	}
	if err := checkKernelAllows(pid, st); err != nil {
		return err
	}
	if err := checkExecutable(pid); err != nil {
		return err
	}
	maps, err := procmaps.Read(pid)
	if err != nil {
		return fmt.Errorf("reading the memory map of process %d: %w", pid, err)
	}
	loader := false
	for _, m := range elfmod.Loaded(maps) {
		b := m.Base()
		// ld-linux-x86-64.so.2, or before glibc 2.34 the file it links to (ld-2.31.so).
		if strings.HasPrefix(b, "ld-linux") || strings.HasPrefix(b, "ld-2.") {
			loader = true
		}
		if strings.HasPrefix(b, "libheaplens-") && !strings.HasPrefix(b, "libheaplens-attach-") {
			return fmt.Errorf("process %d runs under `heaplens run` already (%s is preloaded in it)", pid, b)
		}
	}
	if !loader {
		return fmt.Errorf("process %d is statically linked: it has no dynamic loader to load the library with, so heaplens attach cannot profile it", pid)
	}
	return nil
}

// procState is the state letter of /proc/PID/stat (R, S, D, T, Z, …), 0
// if the line has none.
func procState(pid int) (byte, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The state follows the command name, which may hold spaces and parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2], nil
	}
	return 0, nil
}

// Running reports whether pid exists and is not a zombie.
func Running(pid int) bool {
	s, err := procState(pid)
	return err == nil && s != 'Z' && s != 'X'
}

func readStatus(pid int) (map[string]string, error) {
	st, err := readStatusFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("no process %d", pid)
	}
	return st, nil
}

// filtered reports whether pid runs under seccomp filters (checkSeccomp).
func filtered(pid int) bool {
	st, err := readStatus(pid)
	return err == nil && st["Seccomp"] == "2"
}

func readStatusFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, sc.Err()
}

// checkPtraceAllowed explains Yama's ptrace_scope and a different owner.
func checkPtraceAllowed(pid int, st map[string]string) error {
	root := os.Geteuid() == 0
	uids := strings.Fields(st["Uid"])
	if !root && len(uids) > 0 {
		me := strconv.Itoa(os.Geteuid())
		for _, u := range uids {
			if u != me {
				return fmt.Errorf("process %d runs as user %s: run heaplens attach as that user, or as root", pid, u)
			}
		}
	}
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return nil // no Yama
	}
	switch strings.TrimSpace(string(b)) {
	case "3":
		return fmt.Errorf("ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3, fixed until reboot): heaplens attach cannot work")
	case "2":
		if !root {
			return fmt.Errorf("kernel.yama.ptrace_scope = 2 allows only administrators to attach: run heaplens attach as root (or with CAP_SYS_PTRACE)")
		}
	case "1":
		if !root && !descendant(pid) {
			return fmt.Errorf("kernel.yama.ptrace_scope = 1 allows attaching only to your own child processes: run heaplens attach as root (or with CAP_SYS_PTRACE), or `sysctl kernel.yama.ptrace_scope=0`")
		}
	}
	return nil
}

func descendant(pid int) bool {
	for p, i := pid, 0; p > 1 && i < 1000; i++ {
		st, err := readStatus(p)
		if err != nil {
			return false
		}
		if p, err = strconv.Atoi(st["PPid"]); err != nil {
			return false
		}
		if p == os.Getpid() {
			return true
		}
	}
	return false
}

func checkExecutable(pid int) error {
	f, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil // a deleted or unreadable executable: the memory map decides
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("process %d is not an x86-64 program (%v %v): heaplens supports x86-64 only", pid, f.Class, f.Machine)
	}
	return nil
}
