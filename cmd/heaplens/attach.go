package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/internal/launch"
	"github.com/heaplens/heaplens/internal/ring"
)

func attachCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens attach", "heaplens attach [flags] PID", args, stdout, stderr)
	o := launch.AttachOptions{Rate: ring.DefaultRate, Version: version, Log: stderr}
	fs.StringVar(&o.Output, "o", "", "capture file (default ./heaplens-attach-COMMAND-PID.hlc)")
	fs.Var(sizeFlag{&o.Rate}, "rate", "mean bytes between samples, e.g. 512KiB; 1 records every allocation")
	fs.Uint64Var(&o.Seed, "seed", 0, "fixed sampler seed, for reproducible sessions (0 = random)")
	fs.Var(sizeFlag{&o.RingSize}, "ring-size", "shared-memory ring per process, a power of two from 64KiB to 1GiB (default 16MiB)")
	fs.DurationVar(&o.Duration, "duration", 0, "detach after this long, e.g. 30s (default: at Ctrl-C, heaplens detach PID, or the process's end)")
	fs.BoolVar(&o.NoFollow, "no-follow", false, "profile the process only, not the children it forks while attached")
	fs.BoolVar(&o.NoPython, "no-python", false, "record native frames only: no Python frames, no PyMem hooks")
	fs.BoolVar(&o.NativePythonInternals, "native-python-internals", false, "keep the interpreter's own native frames between Python frames")
	fs.StringVar(&o.Library, "library", "", "for heaplens's own tests: an absolute path to a libheaplens-attach*.so to load instead of the built-in one")
	quiet := fs.Bool("q", false, "no summary at the detach")
	live := fs.Bool("live", false, "serve the web UI while attached (the URL is printed on standard error)")
	liveAddr := fs.String("live-addr", "127.0.0.1:0", "address of the --live web UI (port 0 picks a free port)")
	var ff fleetFlags
	ff.register(fs)
	// PID first, flags after it, as in the usage line of the issue: heaplens attach PID --rate 1.
	var pidArg string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		pidArg, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return exitCode(err)
	}
	if pidArg == "" && fs.NArg() > 0 {
		pidArg = fs.Arg(0)
	}
	if pidArg == "" || fs.NArg() > 1 || (fs.NArg() == 1 && fs.Arg(0) != pidArg) {
		fmt.Fprintln(stderr, "heaplens attach: give one process id (usage: heaplens attach [flags] PID)")
		return 2
	}
	pid, err := strconv.Atoi(pidArg)
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "heaplens attach: %q is not a process id\n", pidArg)
		return 2
	}
	o.PID = pid
	// The default service name is the process's: its comm, which may hold spaces.
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	name := strings.Join(strings.Fields(string(comm)), "_")
	if name == "" {
		name = "pid-" + pidArg
	}
	if err := ff.check([]string{name}, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "heaplens attach: %v\n", err)
		return 2
	}
	stopFleet, err := ff.start(&o.Observer, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens attach: %v\n", err)
		return 1
	}
	if *live {
		o.Started = func(capturePath string) { startLive(capturePath, *liveAddr, stderr) }
	}
	var seen *seenCapture
	if !*quiet {
		seen = newSeenCapture()
		o.Observer = seen.observer(o.Observer)
	}
	res, err := launch.Attach(o)
	stopFleet()
	if err != nil {
		seen = nil // the file may not hold what was written: the summary reads it
	}
	if err != nil && res == nil {
		fmt.Fprintf(stderr, "heaplens attach: %v\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "heaplens: warning: %v; the capture may be incomplete\n", err)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "heaplens: warning: %s\n", w)
	}
	status := fmt.Sprintf("(pid %d): attached for %.1f s, %s", pid, res.Window.Seconds(), res.Ended)
	if !*quiet {
		if err := printSummary(stderr, res.Capture, status, nil, seen); err != nil {
			fmt.Fprintf(stderr, "heaplens: summary: %v\n", err)
		}
	}
	if err != nil {
		return 1
	}
	return 0
}

func detachCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens detach", "heaplens detach PID", args, stdout, stderr)
	if err := fs.Parse(args); err != nil {
		return exitCode(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "heaplens detach: give one process id (usage: heaplens detach PID)")
		return 2
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "heaplens detach: %q is not a process id\n", fs.Arg(0))
		return 2
	}
	agent, err := launch.Detach(pid)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens detach: %v\n", err)
		return 1
	}
	if agent != 0 {
		fmt.Fprintf(stdout, "asked heaplens (pid %d) to detach from pid %d; it writes the capture and exits\n", agent, pid)
	} else {
		fmt.Fprintf(stdout, "detached from pid %d (its heaplens was gone: that session's capture ends where it stopped)\n", pid)
	}
	return 0
}
