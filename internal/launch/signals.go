package launch

import (
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/heaplens/heaplens/internal/sigstart"
	"golang.org/x/sys/unix"
)

// The command must start with the signal dispositions and mask heaplens was
// started with, which package sigstart recorded. Dispositions: the runtime
// resets every signal it handles to the default in children, so heaplens
// catches the signals it must survive with signal.Notify (never
// signal.Ignore, which children would inherit), and sigstart.Restore
// ignores again what was ignored. The mask: see start.

// catchSignals keeps heaplens alive to finish the capture when the command
// is interrupted; it returns the signals to pass on to the command. A signal
// that heaplens was started with ignored stays ignored, in heaplens and the
// command alike.
func catchSignals() chan os.Signal {
	sigstart.Restore()
	ch := make(chan os.Signal, 4)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP} {
		if !sigstart.Ignored(sig) {
			signal.Notify(ch, sig)
		}
	}
	return ch
}

// start starts cmd with the signal mask heaplens was started with: the
// runtime gives a child the mask of the thread that forks it, so the fork
// happens on a locked thread that has that mask for the moment.
func start(cmd *exec.Cmd) error {
	if m, ok := sigstart.Mask(); ok {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		set, old := unix.Sigset_t{}, unix.Sigset_t{}
		set.Val[0] = m
		if err := unix.PthreadSigmask(unix.SIG_SETMASK, &set, &old); err == nil {
			defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
		}
	}
	return cmd.Start()
}

// relay passes sig on to the command unless the command has it already.
// SIGINT and SIGQUIT typed at a terminal reach its whole foreground process
// group, the command included (it stays in heaplens's group for job
// control): relaying them would deliver them twice, so they are relayed
// only when heaplens's group is not a terminal's foreground group, i.e. when
// they were sent to heaplens itself (kill, a supervisor).
func relay(p *os.Process, sig os.Signal) {
	if (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && terminalForeground() {
		return
	}
	p.Signal(sig)
}

// terminalForeground reports whether this process's group is the
// foreground group of its controlling terminal.
func terminalForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer tty.Close()
	pg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}
