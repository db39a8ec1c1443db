package seccomp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxFilters bounds the stack read (the kernel bounds it by its total
// length: 32768 instructions, each filter counting 4 more).
const maxFilters = 8192

// Read returns the filters thread tid runs under, the newest first. tid
// must be stopped by this thread's ptrace (PTRACE_SECCOMP_GET_FILTER),
// which needs CAP_SYS_ADMIN and heaplens itself under no filter.
func Read(tid int) ([][]Insn, error) {
	var out [][]Insn
	for i := 0; i < maxFilters; i++ {
		n, err := getFilter(tid, i, nil)
		if errors.Is(err, unix.ENOENT) {
			if i == 0 {
				return nil, fmt.Errorf("thread %d runs under no seccomp filter", tid)
			}
			return out, nil
		}
		if err != nil {
			switch {
			case errors.Is(err, unix.EACCES):
				return nil, fmt.Errorf("reading it needs CAP_SYS_ADMIN, and heaplens itself under no seccomp filter (PTRACE_SECCOMP_GET_FILTER: %v)", err)
			case errors.Is(err, unix.EIO), errors.Is(err, unix.EINVAL):
				return nil, fmt.Errorf("this kernel does not give a process's seccomp filters (PTRACE_SECCOMP_GET_FILTER needs CONFIG_CHECKPOINT_RESTORE): %w", err)
			case errors.Is(err, unix.EMEDIUMTYPE):
				return nil, fmt.Errorf("one of its seccomp filters is not a classic BPF program: %w", err)
			}
			return nil, fmt.Errorf("reading seccomp filter %d of thread %d: %w", i, tid, err)
		}
		if n <= 0 || n > maxInsns {
			return nil, fmt.Errorf("seccomp filter %d of thread %d: %d instructions", i, tid, n)
		}
		b := make([]byte, 8*n)
		got, err := getFilter(tid, i, b)
		if err != nil || got != n {
			return nil, fmt.Errorf("reading seccomp filter %d of thread %d (%d instructions, then %d): %v", i, tid, n, got, err)
		}
		prog, err := Decode(b)
		if err != nil {
			return nil, fmt.Errorf("seccomp filter %d of thread %d: %w", i, tid, err)
		}
		out = append(out, prog)
	}
	return nil, fmt.Errorf("thread %d runs under more than %d seccomp filters", tid, maxFilters)
}

func getFilter(tid, index int, buf []byte) (int, error) {
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(tid), uintptr(index), uintptr(p), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Verdict runs every filter on d and returns the action that wins, as the
// kernel picks it: the least permissive, the newest filter's on a tie.
func Verdict(filters [][]Insn, d *Data) (uint32, error) {
	for i, f := range filters {
		if err := Validate(f); err != nil {
			return 0, fmt.Errorf("seccomp filter %d: %w", i, err)
		}
	}
	return verdict(filters, d)
}

// verdict is Verdict on filters that passed Validate.
func verdict(filters [][]Insn, d *Data) (uint32, error) {
	ret := uint32(unix.SECCOMP_RET_ALLOW)
	for i, f := range filters {
		r, err := run(f, d)
		if err != nil {
			return 0, fmt.Errorf("seccomp filter %d: %w", i, err)
		}
		if rank(r) < rank(ret) {
			ret = r
		}
	}
	return ret, nil
}

// rank orders actions from the least permissive (as the kernel's
// ACTION_ONLY, signed); one it does not know kills the process.
func rank(r uint32) int32 {
	a := r & unix.SECCOMP_RET_ACTION_FULL
	switch a {
	case unix.SECCOMP_RET_KILL_PROCESS, unix.SECCOMP_RET_KILL_THREAD, unix.SECCOMP_RET_TRAP, unix.SECCOMP_RET_ERRNO,
		unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_RET_TRACE, unix.SECCOMP_RET_LOG, unix.SECCOMP_RET_ALLOW:
		return int32(a)
	}
	return int32(-1 << 31)
}

// Blocked says which call a filter blocks, and how.
type Blocked struct {
	Call   Call
	Action uint32
}

func (b *Blocked) Error() string {
	return fmt.Sprintf("target's seccomp filter blocks %s (%s; heaplens needs it: %s): attach would fail", b.Call.Name, Describe(b.Action), b.Call.Why)
}

// Describe says what an action does to the call.
func Describe(r uint32) string {
	switch r & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_KILL_PROCESS:
		return "kills the process"
	case unix.SECCOMP_RET_KILL_THREAD:
		return "kills the thread"
	case unix.SECCOMP_RET_TRAP:
		return "sends SIGSYS"
	case unix.SECCOMP_RET_ERRNO:
		if n := unix.ErrnoName(unix.Errno(r & unix.SECCOMP_RET_DATA)); n != "" {
			return "returns " + n
		}
		return fmt.Sprintf("returns errno %d", r&unix.SECCOMP_RET_DATA)
	case unix.SECCOMP_RET_USER_NOTIF:
		return "hands it to a supervisor process"
	case unix.SECCOMP_RET_TRACE:
		return "hands it to a tracer"
	case unix.SECCOMP_RET_LOG, unix.SECCOMP_RET_ALLOW:
		return "allows it"
	}
	return fmt.Sprintf("action %#x, which kills the process", r)
}

// Allowed returns a *Blocked for the first call of calls that filters do
// not allow (or only log), on x86-64, nil when they allow all.
func Allowed(filters [][]Insn, calls []Call) error {
	if _, err := Verdict(filters, &Data{}); err != nil { // validates each once
		return err
	}
	for _, c := range calls {
		for _, args := range c.Args {
			d := Data{Nr: c.Nr, Arch: unix.AUDIT_ARCH_X86_64, IP: IP, Args: args}
			r, err := verdict(filters, &d)
			if err != nil {
				return err
			}
			if a := r & unix.SECCOMP_RET_ACTION_FULL; a != unix.SECCOMP_RET_ALLOW && a != unix.SECCOMP_RET_LOG {
				return &Blocked{Call: c, Action: r}
			}
		}
	}
	return nil
}
