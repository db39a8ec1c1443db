// Command heaplens is a sampling memory profiler for native and Python
// programs on Linux. It parses flags and calls into internal packages.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/heaplens/heaplens/internal/launch"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/size"
)

const version = "0.1.0-dev"

const usage = `heaplens: which code holds your memory

usage:
  heaplens run [-o CAPTURE] [--rate SIZE] [--seed N] -- COMMAND [ARGS...]
  heaplens report CAPTURE [--view peak|leaks|live|allocs|temporary|timeline]
                  [--format text|folded|pprof|speedscope|json|html] [-o OUT]
                  [--pid PID] [--thread TID] [--focus RE] [--hide RE]
                  [--at D] [--lifetime D] [--min-age D]
  heaplens serve CAPTURE [--addr 127.0.0.1:0]
  heaplens run --live [--live-wait] ... -- COMMAND
  heaplens run --pprof-addr ADDR | --push URL [--app NAME] [--label K=V]... -- COMMAND
  heaplens run|attach --otlp URL [--app NAME] [--push-every 15s] ...
  heaplens attach PID [-o CAPTURE] [--rate SIZE] [--duration D] [--live] [--no-python]
  heaplens detach PID
  heaplens diff BASE NEW [--view allocs,peak,leaks] [--format text|json|pprof]
                [--fail-over SIZE] [-o OUT]
  heaplens dump CAPTURE
  heaplens window CAPTURE [--mark PID:VALUE] < WINDOWS.jsonl   (for test runners)
  heaplens version

Run "heaplens COMMAND -h" for the flags of a command.
`

func main() {
	// Under an address-space limit the entry point could not lift (it
	// needs CAP_SYS_RESOURCE), the heap grows more slowly: the runtime
	// reserves address space in 64 MiB arenas and dies when it cannot.
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &lim) == nil && lim.Cur != unix.RLIM_INFINITY {
		debug.SetMemoryLimit(int64(lim.Cur / 4))
	}
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdin, stdout, stderr)
	case "report":
		return reportCmd(args[1:], stdout, stderr)
	case "serve":
		return serveCmd(args[1:], stdout, stderr)
	case "dump":
		return dumpCmd(args[1:], stdout, stderr)
	case "diff":
		return diffCmd(args[1:], stdout, stderr)
	case "window":
		return windowCmd(args[1:], stdin, stdout, stderr)
	case "attach":
		return attachCmd(args[1:], stdout, stderr)
	case "detach":
		return detachCmd(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "heaplens", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "heaplens: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// sizeFlag is a flag.Value for byte sizes such as 512KiB.
type sizeFlag struct{ v *uint64 }

func (s sizeFlag) String() string {
	if s.v == nil || *s.v == 0 { // 0: the default is the library's, stated in the usage
		return ""
	}
	return size.FormatSize(*s.v)
}
func (s sizeFlag) Set(x string) error {
	v, err := size.ParseSize(x)
	if err != nil {
		return err
	}
	*s.v = v
	return nil
}

func runCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens run", "heaplens run [flags] -- COMMAND [ARGS...]", args, stdout, stderr)
	o := launch.Options{Rate: ring.DefaultRate, Version: version, Stdin: stdin, Stdout: stdout, Stderr: stderr, Log: stderr}
	fs.StringVar(&o.Output, "o", "", "capture file (default ./heaplens-COMMAND-PID.hlc)")
	fs.Var(sizeFlag{&o.Rate}, "rate", "mean bytes between samples, e.g. 512KiB; 1 records every allocation")
	fs.Uint64Var(&o.Seed, "seed", 0, "fixed sampler seed, for reproducible runs (0 = random)")
	fs.Var(sizeFlag{&o.RingSize}, "ring-size", "shared-memory ring per process, a power of two from 64KiB to 1GiB (default 16MiB; 128MiB with --rate 1)")
	fs.BoolVar(&o.NoFollow, "no-follow", false, "profile the command's own process only, not the processes it starts")
	fs.BoolVar(&o.NoPython, "no-python", false, "record native frames only: no Python frames, no PyMem hooks")
	fs.BoolVar(&o.NativePythonInternals, "native-python-internals", false, "keep the interpreter's own native frames between Python frames")
	quiet := fs.Bool("q", false, "quiet: no summary and no warnings (they are in the capture's notes)")
	live := fs.Bool("live", false, "serve the web UI while the command runs (the URL is printed on standard error)")
	liveAddr := fs.String("live-addr", "127.0.0.1:0", "address of the --live web UI (port 0 picks a free port)")
	liveWait := fs.Bool("live-wait", false, "with --live, keep serving after the command ends, until interrupted")
	var ff fleetFlags
	ff.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitCode(err)
	}
	o.Command = fs.Args()
	if len(o.Command) == 0 {
		fmt.Fprintln(stderr, "heaplens run: no command given (usage: heaplens run [flags] -- COMMAND [ARGS...])")
		return 2
	}
	if err := launch.CheckRingSize(o.RingSize); o.RingSize != 0 && err != nil {
		fmt.Fprintf(stderr, "heaplens run: %v\n", err)
		return 2
	}
	if err := ff.check(o.Command, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "heaplens run: %v\n", err)
		return 2
	}
	stopFleet, err := ff.start(&o.Observer, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens run: %v\n", err)
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
	res, err := launch.Run(o)
	stopFleet()
	if err != nil {
		seen = nil // the file may not hold what was written: the summary reads it
	}
	switch {
	case err != nil && res != nil && res.Status != "":
		// The command ran: its exit status stands, whatever went wrong
		// with the profile (a full disk, …); say so and report what there is.
		fmt.Fprintf(stderr, "heaplens: warning: %v; the capture may be incomplete\n", err)
	case err != nil:
		if errors.Is(err, launch.ErrNotFound) || errors.Is(err, launch.ErrNotExecutable) {
			fmt.Fprintf(stderr, "heaplens: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "heaplens run: %v\n", err)
		}
		if res == nil || res.ExitCode == 0 {
			return 1
		}
		return res.ExitCode
	}
	// -q: nothing of heaplens's on the command's standard error but an error
	// that cost the capture; the warnings are in the capture, as notes.
	for _, w := range res.Warnings {
		if !*quiet {
			fmt.Fprintf(stderr, "heaplens: warning: %s\n", w)
		}
	}
	if res.Capture != "" && !*quiet {
		if err := printSummary(stderr, res.Capture, res.Status, o.Command, seen); err != nil {
			fmt.Fprintf(stderr, "heaplens: summary: %v\n", err)
		}
	}
	if *live && *liveWait && liveURL != "" {
		waitInterrupt(stderr)
	}
	return res.ExitCode
}
