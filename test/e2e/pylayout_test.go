package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// TestPythonLayoutAgrees checks, on real interpreters of 3.13 and later,
// that the three sources of the offsets python.c reads agree field by field:
// the verified table (preload/pylayout.c), the interpreter's own
// _Py_DebugOffsets as the library reads them at run time, and the
// interpreter's headers (offsetof, compiled against its include directory).
// 3.13 is pyenv's shared build; 3.14 and 3.15 are Debian's in the sid root.
func TestPythonLayoutAgrees(t *testing.T) {
	type target struct {
		name    string
		compile func(t *testing.T, args ...string) // gcc with these arguments, where the interpreter lives
		exec    func(t *testing.T, args ...string) string
		include string // the interpreter's include directory, there
		lib     string // its libpython, there
		dir     string // a scratch directory, there
		src     string // the repository's files, copied there
	}
	var targets []target
	home, _ := os.UserHomeDir()
	if m, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", "3.13.*")); len(m) == 0 {
		testenv.Missing(t, "no pyenv CPython 3.13 under ~/.pyenv/versions: its debug offsets are NOT checked against the 3.13 table")
	} else {
		v := m[len(m)-1]
		host := func(t *testing.T, args ...string) string {
			b, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", args, err, b)
			}
			return string(b)
		}
		targets = append(targets, target{name: "pyenv-3.13",
			compile: func(t *testing.T, args ...string) { host(t, append([]string{"gcc"}, args...)...) },
			exec:    host, include: filepath.Join(v, "include", "python3.13"),
			lib: filepath.Join(v, "lib", "libpython3.13.so"), dir: t.TempDir(), src: layoutSources(t, t.TempDir())})
	}
	if r, ok := testenv.SidRoot(t); ok {
		in := func(t *testing.T, args ...string) string {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			b, err := r.Command(ctx, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("in %s: %v: %v\n%s", r.Dir, args, err, b)
			}
			return string(b)
		}
		hostDir, dir := r.TempDir(t)
		layoutSources(t, hostDir)
		for _, py := range r.RootPythons(t) {
			v := fmt.Sprintf("3.%d", py.Minor)
			targets = append(targets, target{name: py.Name,
				compile: func(t *testing.T, args ...string) { in(t, append([]string{"gcc"}, args...)...) },
				exec:    in, include: "/usr/include/python" + v,
				lib: "/usr/lib/x86_64-linux-gnu/libpython" + v + ".so.1.0", dir: dir, src: dir})
		}
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			bin := filepath.Join(tg.dir, "dump-"+tg.name)
			// Not the library's flags: CPython's internal headers need GNU C and do not pass -Wconversion.
			tg.compile(t, "-O0", "-Wall", "-DPY_HEADERS", "-I"+filepath.Join(tg.src, "preload"), "-I"+tg.include,
				"-o", bin, filepath.Join(tg.src, "test", "pylayout", "dump.c"), filepath.Join(tg.src, "preload", "pylayout.c"), "-ldl")
			out := tg.exec(t, bin, tg.lib)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			var hex string
			var status int
			if _, err := fmt.Sscanf(lines[0], "version %s status %d", &hex, &status); err != nil {
				t.Fatalf("bad first line %q: %v", lines[0], err)
			}
			if status != 0 {
				t.Fatalf("Python %s: the library refuses its _Py_DebugOffsets (status %d, see PYDBG_* in preload/pylayout.h)", hex, status)
			}
			if len(lines) < 15 {
				t.Fatalf("too few fields:\n%s", out)
			}
			for _, l := range lines[1:] {
				var name string
				var table, debug, header int
				if _, err := fmt.Sscanf(l, "%s %d %d %d", &name, &table, &debug, &header); err != nil {
					t.Fatalf("bad line %q: %v", l, err)
				}
				if table != debug || table != header {
					t.Errorf("Python %s %s: table %d, _Py_DebugOffsets %d, headers %d", hex, name, table, debug, header)
				}
			}
			t.Logf("Python %s: %d fields agree in the table, _Py_DebugOffsets and the headers", hex, len(lines)-1)
		})
	}
}

// layoutSources copies what the layout dump is built from into dir, and
// returns dir: the library's other headers stay out of the include path
// (its limits.h would stand for <limits.h>).
func layoutSources(t *testing.T, dir string) string {
	t.Helper()
	for _, f := range []string{"preload/pylayout.c", "preload/pylayout.h", "test/pylayout/dump.c"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
