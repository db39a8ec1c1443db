// Package e2e runs bin/heaplens on the workloads in test/workloads, whose
// allocation sites have known sizes, and checks what it reports.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

var root = testenv.Root

func heaplensBin(t *testing.T) string { return testenv.Heaplens(t) }

// build compiles a workload from test/workloads into dir.
func build(t *testing.T, dir, src string, extra ...string) string {
	t.Helper()
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	cc := "gcc"
	if strings.HasSuffix(src, ".cpp") {
		cc = "g++"
	}
	args := append([]string{"-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", out, filepath.Join(root, "test", "workloads", src)}, extra...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, b)
	}
	return out
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a command with a deadline: a hang is a failure, not a stuck suite.
func run(t *testing.T, timeout time.Duration, name string, args ...string) result {
	t.Helper()
	return runEnv(t, timeout, nil, name, args...)
}

// runEnv is run with extra environment variables.
func runEnv(t *testing.T, timeout time.Duration, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 10 * time.Second // a hung grandchild holding the pipes must not hang the suite
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v: still running after %v (deadlock?)\nstderr:\n%s", name, args, timeout, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return result{out.String(), errb.String(), code}
}

// profile runs `heaplens run` and returns the capture path and the run's result.
func profile(t *testing.T, dir string, flags []string, command ...string) (string, result) {
	t.Helper()
	capPath := filepath.Join(dir, filepath.Base(command[0])+strconv.Itoa(len(flags))+".hlc")
	args := append([]string{"run", "-o", capPath}, flags...)
	args = append(append(args, "--"), command...)
	res := run(t, 5*time.Minute, heaplensBin(t), args...)
	return capPath, res
}

// folded is a parsed folded report: stack line -> bytes.
type folded map[string]float64

func report(t *testing.T, capPath, view string) folded {
	t.Helper()
	return reportWith(t, capPath, "--view", view)
}

// reportWith runs `heaplens report` with extra flags and parses folded output.
func reportWith(t *testing.T, capPath string, args ...string) folded {
	t.Helper()
	res := run(t, 2*time.Minute, heaplensBin(t), append([]string{"report", capPath, "--format", "folded"}, args...)...)
	if res.code != 0 {
		t.Fatalf("report %v: exit %d\n%s", args, res.code, res.stderr)
	}
	f := folded{}
	sc := bufio.NewScanner(strings.NewReader(res.stdout))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("bad folded line %q", line)
		}
		f[line[:i]] += v
	}
	return f
}

// site sums the bytes of every stack that has a frame of function fn.
func (f folded) site(fn string) float64 {
	var sum float64
	for stack, v := range f {
		for _, fr := range strings.Split(stack, ";") {
			if strings.HasPrefix(fr, fn+" (") {
				sum += v
				break
			}
		}
	}
	return sum
}

func (f folded) total() float64 {
	var sum float64
	for _, v := range f {
		sum += v
	}
	return sum
}

// frames returns the stacks containing fn, for failure messages.
func (f folded) stacksWith(fn string) []string {
	var out []string
	for stack := range f {
		if strings.Contains(stack, fn) {
			out = append(out, stack)
		}
	}
	return out
}
