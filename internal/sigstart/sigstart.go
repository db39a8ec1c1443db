// Package sigstart tells which signals the process was started with
// ignored or blocked, so that heaplens can start its command with the same
// dispositions and mask. Before any Go code runs, the runtime installs its
// own handler for most signals (a handled signal is reset to the default in
// children) and unblocks some, so an inherited SIG_IGN (a background job's
// SIGQUIT, a Python parent's SIGPIPE) or blocked SIGINT would otherwise be
// lost between heaplens's parent and the command. An assembly entry point
// (entry_linux_amd64.s, entry_linux_arm64.s; the Makefile links with
// -ldflags=-E=github.com/heaplens/heaplens/internal/sigstart.entry) records
// them before the runtime starts. Without it (another GOARCH, or a plain go
// build) only SIGHUP and SIGINT are known, which the runtime leaves ignored.
package sigstart

import (
	"os/signal"
	"syscall"
)

var (
	startIgnored uint64 // bit n-1: signal n was ignored at entry
	startMask    uint64 // bit n-1: signal n was blocked at entry
	captured     uint64 // 1 once entry ran
)

// Known reports whether the dispositions at start were recorded.
func Known() bool { return captured == 1 }

// Mask returns the signal mask the process started with (bit n-1 for
// signal n), if known. The runtime unblocks some signals (SIGINT, SIGTERM,
// SIGHUP, SIGQUIT…) in every thread and gives children the mask of the
// thread that starts them, so the command would lose them from its mask.
func Mask() (uint64, bool) { return startMask, Known() }

// Ignored reports whether sig was ignored when the process started.
func Ignored(sig syscall.Signal) bool {
	if Known() && sig >= 1 && sig <= 64 {
		return startIgnored&(1<<(sig-1)) != 0
	}
	return signal.Ignored(sig) // the runtime keeps SIGHUP and SIGINT ignored
}

// Restore ignores again, in this process and so in the children it starts,
// every signal that was ignored at start and that the runtime took over.
// Left as the runtime has them (so at their default in children): SIGCHLD
// (heaplens must wait for its command), SIGURG and SIGPROF (the runtime's
// preemption and profiling) and the fault signals signal.Ignore does not
// touch (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGSTKFLT).
func Restore() {
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		switch sig {
		case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF:
			continue
		}
		if Ignored(sig) && !signal.Ignored(sig) {
			signal.Ignore(sig)
		}
	}
}
