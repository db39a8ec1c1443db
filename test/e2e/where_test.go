package e2e

import (
	"context"
	"os"
	"path/filepath"
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
