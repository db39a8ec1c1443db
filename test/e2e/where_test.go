package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// where runs heaplens on the host or, for the Python versions newer than
// the machine's, inside the sid root (testenv.SidRoot): paths in a command
// are as the runner sees them, host paths are where the test reads files.
type where struct {
	root   *testenv.Chroot // nil: the host
	bin    string          // heaplens, as the runner sees it
	host   string          // a scratch directory, on the host
	inside string          // the same, as the runner sees it
}

func onHost(t *testing.T) where {
	d := t.TempDir()
	return where{bin: heaplensBin(t), host: d, inside: d}
}

func inRoot(t *testing.T, r testenv.Chroot) where {
	host, inside := r.TempDir(t)
	return where{root: &r, bin: r.Heaplens(t, host), host: host, inside: inside}
}

// file returns the host and runner paths of name in the scratch directory.
func (w where) file(name string) (host, inside string) {
	return filepath.Join(w.host, name), filepath.Join(w.inside, name)
}

// workload returns the path, as the runner sees it, of a file of
// test/workloads (copied into the root when there is one).
func (w where) workload(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(root, "test", "workloads", name)
	if w.root == nil {
		return src
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	host, inside := w.file(name)
	if err := os.WriteFile(host, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return inside
}

// heaplens runs heaplens with args, and extra environment variables.
func (w where) heaplens(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	return w.run(t, timeout, env, append([]string{w.bin}, args...)...)
}

// run runs a command where w says, with extra environment variables.
func (w where) run(t *testing.T, timeout time.Duration, env []string, argv ...string) result {
	t.Helper()
	if w.root != nil {
		argv = w.root.Command(context.Background(), argv...).Args
	}
	return runEnv(t, timeout, env, argv[0], argv[1:]...)
}

// captures numbers the captures of w.profile.
var captures atomic.Int64

// profile runs command under heaplens run with flags where w says and
// returns the capture's host path.
func (w where) profile(t *testing.T, flags []string, command ...string) (string, result) {
	t.Helper()
	capPath, capArg := w.file(fmt.Sprintf("%s-%d.hlc", filepath.Base(command[0]), captures.Add(1)))
	args := append(append([]string{"run", "-o", capArg}, flags...), "--")
	return capPath, w.heaplens(t, 5*time.Minute, nil, append(args, command...)...)
}

// copy puts a host file (a library the test built) where w runs and
// returns its path as the runner sees it.
func (w where) copy(t *testing.T, src string) string {
	t.Helper()
	if w.root == nil {
		return src
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	host, inside := w.file(filepath.Base(src))
	if err := os.WriteFile(host, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return inside
}

// command is argv as exec runs it where w says.
func (w where) command(argv ...string) []string {
	if w.root == nil {
		return argv
	}
	return w.root.Command(context.Background(), argv...).Args
}

// attacher is the argv prefix that runs w's heaplens beside pid: inside the
// root, in the target's own mount namespace (its /proc and /dev/shm, where
// the ring is), as it is the same PID namespace.
func (w where) attacher(pid int) []string {
	if w.root == nil {
		return []string{w.bin}
	}
	return []string{"nsenter", "-t", strconv.Itoa(pid), "-m", "--", "chroot", w.root.Dir, w.bin}
}

// pyWhere is an interpreter the Python tests must pass on, and where it
// runs: the host's (testenv.Pythons) or the sid root's 3.14 and 3.15.
type pyWhere struct {
	name, path string
	minor      int
	root       *testenv.Chroot // nil: the host
}

func (p pyWhere) where(t *testing.T) where {
	if p.root == nil {
		return onHost(t)
	}
	return inRoot(t, *p.root)
}

// everyPython returns the host's interpreters and the sid root's; a missing
// one, or a missing root, fails t loudly (testenv.Missing).
func everyPython(t *testing.T) []pyWhere {
	t.Helper()
	var all []pyWhere
	for _, py := range testenv.Pythons(t) {
		all = append(all, pyWhere{py.Name, py.Path, py.Minor, nil})
	}
	return append(all, rootPythons(t)...)
}

// rootPythons returns the sid root's interpreters, failing t loudly for a
// missing one or a missing root.
func rootPythons(t *testing.T) []pyWhere {
	t.Helper()
	r, ok := testenv.SidRoot(t)
	if !ok {
		return nil
	}
	var all []pyWhere
	for _, py := range r.RootPythons(t) {
		all = append(all, pyWhere{py.Name, py.Path, py.Minor, &r})
	}
	return all
}
