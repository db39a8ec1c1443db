package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// TestShimHelpersFolded runs a Python script through pyenv's shim, which
// passes through dozens of short-lived bash, env and readlink processes
// before it execs the interpreter: the summary folds them into one line,
// no shell frame is among the top leak suspects, and the first suspect is
// the script's line keeping 24 MiB (within its interval).
func TestShimHelpersFolded(t *testing.T) {
	home, _ := os.UserHomeDir()
	shim := filepath.Join(home, ".pyenv", "shims", "python3")
	versions, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", "3.12.*"))
	if _, err := os.Stat(shim); err != nil || len(versions) == 0 {
		testenv.Missing(t, "no pyenv shim %s or CPython 3.12 under ~/.pyenv/versions: helper folding is NOT tested", shim)
		return
	}
	dir := t.TempDir()
	capPath := filepath.Join(dir, "shim.hlc")
	res := runEnv(t, 2*time.Minute, []string{"PYENV_VERSION=" + filepath.Base(versions[len(versions)-1])},
		heaplensBin(t), "run", "-o", capPath, "--", shim, filepath.Join(root, "test", "workloads", "pyshim.py"))
	if res.code != 0 || !strings.Contains(res.stdout, "kept 25165824") {
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	m := regexp.MustCompile(`(\d+) short-lived helper process image\(s\) \(([^)]*)\)`).FindStringSubmatch(res.stderr)
	if m == nil {
		t.Fatalf("no line folding the shim's helpers:\n%s", res.stderr)
	}
	if n, _ := strconv.Atoi(m[1]); n < 5 || !strings.Contains(m[2], "bash") {
		t.Errorf("%s helpers (%s) folded; the shim runs dozens, bash among them", m[1], m[2])
	}
	i := strings.Index(res.stderr, "top leak suspects")
	if i < 0 {
		t.Fatalf("no leak suspects:\n%s", res.stderr)
	}
	var suspects []string
	for _, l := range strings.Split(res.stderr[i:], "\n")[1:] {
		if !regexp.MustCompile(`^ +\d+\. `).MatchString(l) {
			break
		}
		suspects = append(suspects, l)
	}
	for _, l := range suspects {
		if regexp.MustCompile(`\((bash|dash|sh|env|readlink|basename)\)|xmalloc|xrealloc`).MatchString(l) {
			t.Errorf("a shell frame among the top leak suspects: %s\n%s", l, res.stderr)
		}
	}
	top := regexp.MustCompile(`^ +1\. +([0-9.]+) (KiB|MiB) ± ([0-9.]+) (KiB|MiB) +<module> \(.*pyshim\.py:4\)`).FindStringSubmatch(suspects[0])
	if top == nil {
		t.Fatalf("the first suspect is not pyshim.py:4:\n%s", res.stderr)
	}
	got, pm := humanBytes(t, top[1], top[2]), humanBytes(t, top[3], top[4])
	if want := float64(24 << 20); got < want-pm || got > want+pm {
		t.Errorf("pyshim.py:4 keeps %.1f MiB ± %.1f MiB by the summary, exactly 24 MiB", got/(1<<20), pm/(1<<20))
	}
	// The leaks report of the whole tree folds them the same way.
	leaks := run(t, 2*time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks")
	if !strings.Contains(leaks.stdout, "short-lived helper process image(s)") || regexp.MustCompile(`xmalloc|xrealloc|\((bash|dash|sh)\)`).MatchString(leaks.stdout) {
		t.Errorf("the leaks report does not fold the helpers, or lists a shell frame:\n%s", leaks.stdout)
	}
	t.Logf("%s helpers (%s); first suspect: %s", m[1], m[2], strings.TrimSpace(suspects[0]))
}
