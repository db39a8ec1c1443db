package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The command starts with the signal dispositions and mask heaplens was
// started with: SigIgn, SigBlk and SigCgt as in a bare run, whatever the
// parent set up before starting heaplens.
func TestSignalStateAsBare(t *testing.T) {
	hl := heaplensBin(t)
	dir := t.TempDir()
	py := "/usr/bin/python3"
	status := []string{"grep", "-E", "^Sig(Blk|Ign|Cgt)", "/proc/self/status"}
	// Each wrapper sets up a starting state, then runs its arguments.
	wrappers := []struct {
		name   string
		prefix []string
		field  string // Sig... line whose bits the wrapper sets (the test's own
		bits   uint64 // parent may have set others)
	}{
		{"default", nil, "SigIgn", 0},
		// A script's background job starts with SIGINT and SIGQUIT ignored.
		{"background job of a script", []string{"sh", "-c", `"$@" & wait`, "sh"}, "SigIgn", 1<<1 | 1<<2},
		{"nohup", []string{"nohup"}, "SigIgn", 1 << 0},
		// Python ignores SIGPIPE and SIGXFSZ, and its exec keeps them.
		{"ignored and blocked by a parent", []string{py, "-c", `import os, signal, sys
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP, signal.SIGUSR2})
os.execvp(sys.argv[1], sys.argv[1:])`}, "SigBlk", 1<<0 | 1<<1 | 1<<11},
	}
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			argv := func(cmd ...string) []string { return append(append([]string(nil), w.prefix...), cmd...) }
			bare := runArgv(t, argv(status...))
			if got := sigField(bare.stdout, w.field); bare.code != 0 || got&w.bits != w.bits {
				t.Fatalf("bare run: exit %d, %q; want bits %#x in %s (the wrapper failed to set its state)\n%s", bare.code, bare.stdout, w.bits, w.field, bare.stderr)
			}
			cap := filepath.Join(dir, strings.ReplaceAll(w.name, " ", "_")+".hlc")
			prof := runArgv(t, argv(append([]string{hl, "run", "-q", "-o", cap, "--"}, status...)...))
			if prof.code != 0 || prof.stdout != bare.stdout {
				t.Errorf("under heaplens: exit %d\n%s\nwant as bare:\n%s\n%s", prof.code, prof.stdout, bare.stdout, prof.stderr)
			}
		})
	}
}

// sigField parses the hexadecimal set of a Sig... line of /proc/PID/status.
func sigField(status, field string) uint64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":\t"); ok {
			n, _ := strconv.ParseUint(v, 16, 64)
			return n
		}
	}
	return 0
}

func runArgv(t *testing.T, argv []string) result {
	t.Helper()
	return run(t, time.Minute, argv[0], argv[1:]...)
}

// Ctrl-C typed at a terminal, kill -INT sent to heaplens, and
// _thread.interrupt_main each raise KeyboardInterrupt once in a Python
// command, as in a bare run, on every interpreter.
func TestPythonKeyboardInterrupt(t *testing.T) {
	const want = "ready\nKeyboardInterrupt\nhandled\n"
	ways := []struct {
		name, mode string
		how        func(t *testing.T, argv []string) result
	}{
		{"Ctrl-C at a terminal", "signal", func(t *testing.T, argv []string) result { return underTerminal(t, argv, "\x03") }},
		{"kill -INT", "signal", killINT},
		{"_thread.interrupt_main", "interrupt_main", func(t *testing.T, argv []string) result { return interactive(t, argv, nil, nil) }},
	}
	for _, py := range everyPython(t) {
		for _, way := range ways {
			t.Run(py.name+"/"+way.name, func(t *testing.T) {
				// In the sid root the chain unshare, sh, chroot execs: the
				// signal and the terminal reach the same process.
				w := py.where(t)
				script := w.workload(t, "interrupt.py")
				bare := way.how(t, w.command(py.path, script, way.mode))
				if bare.code != 0 || bare.stdout != want {
					t.Fatalf("bare: exit %d, stdout %q, want %q\n%s", bare.code, bare.stdout, want, bare.stderr)
				}
				_, capArg := w.file(way.mode + ".hlc")
				prof := way.how(t, w.command(w.bin, "run", "-q", "-o", capArg, "--", py.path, script, way.mode))
				if prof.code != bare.code || prof.stdout != bare.stdout || prof.stderr != bare.stderr {
					t.Errorf("under heaplens: exit %d, stdout %q, stderr %q; want as bare: %d, %q, %q",
						prof.code, prof.stdout, prof.stderr, bare.code, bare.stdout, bare.stderr)
				}
			})
		}
	}
}

// killINT sends SIGINT to the process it started, as `kill -INT PID`
// does: there is no terminal, and the signal reaches only that process.
func killINT(t *testing.T, argv []string) result {
	return interactive(t, argv, &syscall.SysProcAttr{Setsid: true}, func(p *os.Process) {
		p.Signal(syscall.SIGINT)
	})
}

// underTerminal runs argv in a new session whose controlling terminal is
// a new pseudo-terminal, as a shell runs a foreground job, and types keys
// at that terminal once the command printed its first line.
func underTerminal(t *testing.T, argv []string, keys string) result {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal (/dev/ptmx): %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, ptmx) // the echo of the keys
	return interactiveStdin(t, argv, pts, &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}, func(*os.Process) {
		pts.Close()
		ptmx.Write([]byte(keys))
	})
}

func interactive(t *testing.T, argv []string, attr *syscall.SysProcAttr, ready func(*os.Process)) result {
	t.Helper()
	return interactiveStdin(t, argv, nil, attr, ready)
}

// interactiveStdin starts argv and calls ready once it printed a line.
func interactiveStdin(t *testing.T, argv []string, stdin *os.File, attr *syscall.SysProcAttr, ready func(*os.Process)) result {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.SysProcAttr = stdin, attr
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	r := bufio.NewReader(out)
	first, _ := r.ReadString('\n')
	if ready != nil {
		ready(cmd.Process)
	}
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return result{first + string(rest), errb.String(), code}
}
