// Package testenv finds what the end-to-end test packages run: the
// repository, the heaplens binary that `make` builds, and every supported
// CPython. Something missing fails the test loudly, never skips it.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
)

// Root is the repository's top directory.
var Root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}()

// Heaplens returns the path of bin/heaplens, failing t when it is missing.
func Heaplens(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(Root, "bin", "heaplens")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make` first (make test does): %v", bin, err)
	}
	return bin
}

// Missing fails t, loudly, for something a test needs that this machine
// lacks (a tool, a package, a Python version), naming what does not run
// because of it. The test goes on with what it can still check: callers
// return or continue after it. scripts/deps.sh installs everything the
// suite needs, so Missing is a machine set up by hand, never a pass.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Errorf("!!! MISSING: "+format, args...)
}

// Python is one supported interpreter.
type Python struct {
	Name  string // "pyenv-3.12", "debian-python3"
	Path  string
	Minor int // 3.Minor
}

// Pythons returns every interpreter Python features are tested on: pyenv's
// CPython 3.8–3.13 (the newest patch release of each) and Debian's
// statically linked /usr/bin/python3 (3.11). Each missing one fails t.
func Pythons(t testing.TB) []Python {
	t.Helper()
	var found []Python
	home, _ := os.UserHomeDir()
	for minor := 8; minor <= 13; minor++ {
		m, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", fmt.Sprintf("3.%d.*", minor), "bin", "python3"))
		sort.Strings(m)
		if len(m) == 0 {
			t.Errorf("no pyenv CPython 3.%d under ~/.pyenv/versions: its Python tests do NOT run", minor)
			continue
		}
		found = append(found, Python{fmt.Sprintf("pyenv-3.%d", minor), m[len(m)-1], minor})
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		found = append(found, Python{"debian-python3", "/usr/bin/python3", 11})
	} else {
		t.Errorf("/usr/bin/python3 (Debian's static build) is missing: its Python tests do NOT run")
	}
	return found
}
