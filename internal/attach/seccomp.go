package attach

import (
	"fmt"
	"os"
	"strconv"

	"github.com/heaplens/heaplens/internal/inject"
	"github.com/heaplens/heaplens/internal/seccomp"
)

// checkSeccomp says whether the seccomp filters of thread tid of pid, which
// this thread has stopped, allow every call the injection and the library
// make (seccomp.Needed; docs/attach.md, "Seccomp filters"). Filters belong
// to threads: the others must run under as many as tid (a filter that went
// in before they were made, or with SECCOMP_FILTER_FLAG_TSYNC, is theirs
// too), else heaplens cannot tell what they allow.
func checkSeccomp(pid, tid int) error {
	filters, err := seccomp.Read(tid)
	if err != nil {
		return fmt.Errorf("process %d runs under a seccomp filter, which heaplens must read to know what it allows: %w; not attaching", pid, err)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("no process %d", pid)
	}
	for _, e := range ents {
		st, err := readStatusFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
		if n, ok := st["Seccomp_filters"]; err == nil && ok && n != strconv.Itoa(len(filters)) {
			return fmt.Errorf("the threads of process %d run under different seccomp filters (thread %d under %d, thread %s under %s): heaplens checks one thread's, so it does not attach", pid, tid, len(filters), e.Name(), n)
		}
	}
	return seccomp.Allowed(filters, seccomp.Needed(os.Getpid()))
}

// sandboxCheck is what attaching to pid checks while a thread is stopped:
// nothing for a process under no filter.
func sandboxCheck(pid int, filtered bool) func(tid int) error {
	if !filtered {
		return nil
	}
	return func(tid int) error { return checkSeccomp(pid, tid) }
}

// checkLoaded checks the filters of a process whose library was loaded
// already (a filter may have gone in since), on its main thread.
func checkLoaded(pid int, filtered bool) error {
	if !filtered {
		return nil
	}
	return inject.Stopped(pid, func() error { return checkSeccomp(pid, pid) })
}
