// Package programs runs programs nobody here wrote (node, java, redis, git,
// gcc, perl, sqlite3, xz, bash, a cargo-built Rust program, a C program with
// a thousand threads) bare and under `heaplens run`, at heaplens's default
// rate and at --rate 1, and requires the same exit status, standard output
// and standard error every way: heaplens must not change what the program it
// profiles does. Where a program prints a known answer, the bare run must
// print it; where its allocations are known, the --rate 1 profile must hold
// them exactly.
//
// The programs' sources are in test/workloads/programs. scripts/deps.sh
// installs every program; one that is missing fails its case loudly.
package programs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/test/testenv"
)

var (
	root    = testenv.Root
	sources = filepath.Join(root, "test", "workloads", "programs")
)

// way is one way of running a program: bare (rate ""), or under heaplens at
// its default rate ("default") or at a given --rate.
type way struct{ name, rate string }

var (
	bare    = way{"bare", ""}
	sampled = way{"heaplens", "default"}
	exact   = way{"heaplens --rate 1", "1"}
	allWays = []way{bare, sampled, exact}
)

// outcome is what one run of a program did.
type outcome struct {
	way            way
	code           int // 128+N when signal N killed it, as heaplens run reports it
	stdout, stderr string
	capture        string // the capture under heaplens, "" bare
	elapsed        time.Duration
}

const runTimeout = 3 * time.Minute // one program, one way, on a loaded 2-core machine

// command returns the command that runs argv the given way. Under heaplens
// it is `heaplens run -q`: -q drops heaplens's summary from standard error,
// which is then the program's own (heaplens's warnings, and its messages
// when it cannot profile, still go there: those are differences).
func command(t *testing.T, w way, capDir string, argv []string) (args []string, capture string) {
	if w.rate == "" {
		return argv, ""
	}
	capture = filepath.Join(capDir, fmt.Sprintf("%s-%s.hlc", filepath.Base(argv[0]), strings.ReplaceAll(w.rate, " ", "")))
	args = []string{testenv.Heaplens(t), "run", "-q", "-o", capture}
	if w.rate != "default" {
		args = append(args, "--rate", w.rate)
	}
	return append(append(args, "--"), argv...), capture
}

// start starts argv the given way in dir, in its own process group (a hung
// run is killed whole), with env added to the environment. The capture goes
// to capDir, outside the program's working directory.
func start(t *testing.T, ctx context.Context, w way, dir, capDir string, env []string, argv ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, string) {
	t.Helper()
	args, capture := command(t, w, capDir, argv)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second // a grandchild holding the pipes must not hang the suite
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return cmd, &stdout, &stderr, capture
}

// wait waits for a command that start started and returns its outcome.
func wait(t *testing.T, ctx context.Context, w way, cmd *exec.Cmd, stdout, stderr *bytes.Buffer, capture string, began time.Time) outcome {
	t.Helper()
	err := cmd.Wait()
	o := outcome{way: w, stdout: stdout.String(), stderr: stderr.String(), capture: capture, elapsed: time.Since(began)}
	if ctx.Err() != nil {
		t.Fatalf("%s: %s still running after its deadline (a hang?)\nstdout:\n%s\nstderr:\n%s", w.name, strings.Join(cmd.Args, " "), tail(o.stdout, 20), tail(o.stderr, 20))
	}
	if o.code, err = exitStatus(err); err != nil {
		t.Fatalf("%s: %s: %v", w.name, strings.Join(cmd.Args, " "), err)
	}
	return o
}

// exitStatus is a finished command's exit status, 128+N when signal N
// killed it (as heaplens run reports it), from cmd.Wait's error.
func exitStatus(err error) (int, error) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, err
	}
	if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}

// runIn runs argv to its end the given way in dir.
func runIn(t *testing.T, w way, dir, capDir string, env []string, argv ...string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	began := time.Now()
	cmd, stdout, stderr, capture := start(t, ctx, w, dir, capDir, env, argv...)
	return wait(t, ctx, w, cmd, stdout, stderr, capture, began)
}

// same requires a run under heaplens to have done what the bare run did:
// the same exit status, standard output and standard error, after norm
// (nil: none) rewrote what legitimately differs from run to run.
func same(t *testing.T, b, h outcome, norm func(string) string) {
	t.Helper()
	if norm == nil {
		norm = func(s string) string { return s }
	}
	if b.code != h.code {
		t.Errorf("%s: exit status %d, bare %d\nstderr under heaplens:\n%s", h.way.name, h.code, b.code, tail(h.stderr, 30))
	}
	for _, s := range []struct{ name, b, h string }{{"standard output", b.stdout, h.stdout}, {"standard error", b.stderr, h.stderr}} {
		if nb, nh := norm(s.b), norm(s.h); nb != nh {
			t.Errorf("%s: %s differs from the bare run's: %s", h.way.name, s.name, firstDifference(nb, nh))
		}
	}
}

// firstDifference names the first line where bare and under-heaplens texts
// differ, with the lines around it both ways.
func firstDifference(b, h string) string {
	bl, hl := strings.Split(b, "\n"), strings.Split(h, "\n")
	i := 0
	for i < len(bl) && i < len(hl) && bl[i] == hl[i] {
		i++
	}
	window := func(lines []string) string {
		lo, hi := max(0, i-2), min(len(lines), i+8)
		return "    " + strings.Join(lines[lo:hi], "\n    ")
	}
	return fmt.Sprintf("line %d\n  bare (%d lines):\n%s\n  under heaplens (%d lines):\n%s", i+1, len(bl), window(bl), len(hl), window(hl))
}

// need reports, loudly, the first of the executables that is not on PATH.
func need(t *testing.T, names ...string) bool {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			testenv.Missing(t, "%s is not on PATH (scripts/deps.sh installs it): this case does NOT run", n)
			return false
		}
	}
	return true
}

// profile is `heaplens report CAPTURE --format json` of a view, with flags.
func profile(t *testing.T, capture, view string, flags ...string) *export.Doc {
	t.Helper()
	args := append([]string{"report", capture, "--view", view, "--format", "json"}, flags...)
	out, err := exec.Command(testenv.Heaplens(t), args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("heaplens %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("heaplens %s: %v", strings.Join(args, " "), err)
	}
	var d export.Doc
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("heaplens %s: not a JSON profile: %v", strings.Join(args, " "), err)
	}
	return &d
}

// site is what a profile holds at the stacks that pass through a function.
type site struct {
	bytes, objects float64
	ci95           float64 // half-width of the 95 % interval of bytes
	rows           int
}

// site sums the rows whose stack has a frame named any of names (the
// demangled function name, as in the JSON's frame.name). The rows' samples
// are independent, so their variances add.
func siteOf(d *export.Doc, names ...string) site {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var s site
	var variance float64
	for i, st := range d.Samples.Stack {
		for _, f := range d.Stacks[st] {
			if want[d.Frames[f].Name] {
				s.bytes += float64(d.Samples.Bytes[i])
				s.objects += float64(d.Samples.Objects[i])
				ci := float64(d.Samples.BytesCI95[i])
				variance += ci * ci
				s.rows++
				break
			}
		}
	}
	s.ci95 = math.Sqrt(variance)
	return s
}

// processes lists the commands of a profile's processes, by the base name
// of their argv[0] (the executable's own name may be a Debian alias:
// x86_64-linux-gnu-as for as).
func processes(d *export.Doc) []string {
	var names []string
	for _, p := range d.Processes {
		if len(p.Cmdline) > 0 {
			names = append(names, filepath.Base(p.Cmdline[0]))
		}
	}
	return names
}

// noDrops fails t when a profile lost records: exact totals need them all.
func noDrops(t *testing.T, d *export.Doc) {
	t.Helper()
	if d.Drops.Allocs != 0 || d.Drops.Frees != 0 || d.Drops.LostBytes != 0 {
		t.Errorf("the capture dropped records (%+v): its exact totals cannot be checked", d.Drops)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[… %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
