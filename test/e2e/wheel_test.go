package e2e

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// The sample project's failing tests and what each failure must name (a
// frame of its top stack: Python, native, and the OpenMP hand-off); every
// other test must pass. test/pytest_project/test_limits.py says why.
var pytestExpect = map[string]string{
	"test_leaky_cache_fails": "fill_cache (",
	"test_numpy_spike_fails": "spike (",
	"test_c_leak_fails":      "native_hold (native.c:",
	"test_openmp_leak_fails": "[pool: libgomp (openmp)]",
	"test_full_ring_fails":   "sampled allocations and frees during the test",
}

var pytestPasses = []string{"test_leaky_cache_within_limit_passes", "test_numpy_spike_within_limits_passes", "test_unmarked_allocates_passes"}

// junit is what pytest --junitxml writes, as far as the test reads it.
type junit struct {
	Cases []struct {
		Name    string `xml:"name,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
			Text    string `xml:",chardata"`
		} `xml:"failure"`
		Error *struct {
			Message string `xml:"message,attr"`
		} `xml:"error"`
		Skipped *struct{} `xml:"skipped"`
	} `xml:"testsuite>testcase"`
}

// TestWheelAndPytestPlugin installs the wheel that make wheel built into
// a fresh venv of every supported CPython and runs the sample project
// with pytest --heaplens: exactly the expected tests fail, naming the
// expected frames, and heaplens runs from the venv both ways.
func TestWheelAndPytestPlugin(t *testing.T) {
	wheel := theWheel(t)
	dir := t.TempDir()
	project := filepath.Join(dir, "project")
	sampleProject(t, project)
	for _, py := range testenv.Pythons(t) {
		t.Run(py.Name, func(t *testing.T) {
			venv := filepath.Join(dir, py.Name)
			if r := run(t, 2*time.Minute, py.Path, "-m", "venv", venv); r.code != 0 {
				t.Fatalf("%s -m venv: %s", py.Path, r.stderr)
			}
			pip := run(t, 5*time.Minute, filepath.Join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", wheel, "pytest", "numpy")
			if pip.code != 0 {
				testenv.Missing(t, "pip install of the wheel, pytest and numpy into a %s venv failed: %s", py.Name, pip.stderr)
				return
			}
			for _, argv := range [][]string{{filepath.Join(venv, "bin", "heaplens"), "version"}, {filepath.Join(venv, "bin", "python"), "-m", "heaplens", "version"}} {
				if r := run(t, time.Minute, argv[0], argv[1:]...); r.code != 0 || !strings.HasPrefix(r.stdout, "heaplens ") {
					t.Errorf("%v: exit %d, %q %s", argv, r.code, r.stdout, r.stderr)
				}
			}
			py := filepath.Join(venv, "bin", "python")
			// The C extension module, built with this Python's headers.
			paths := run(t, time.Minute, py, "-c", "import sysconfig; print(sysconfig.get_paths()['include'], sysconfig.get_config_var('EXT_SUFFIX'))")
			f := strings.Fields(paths.stdout)
			if len(f) != 2 {
				t.Fatalf("%s: no include directory and extension suffix: %q %s", py, paths.stdout, paths.stderr)
			}
			if out, err := exec.Command("gcc", "-shared", "-fPIC", "-fopenmp", "-O1", "-g", "-I"+f[0], "-o", filepath.Join(project, "native"+f[1]),
				filepath.Join(project, "native.c")).CombinedOutput(); err != nil {
				testenv.Missing(t, "building the C extension for %s (its headers: %s): %v\n%s", py, f[0], err, out)
				return
			}
			// Without --heaplens the markers change nothing.
			plain := runIn(t, project, nil, py, "-m", "pytest", "-q", "-p", "no:cacheprovider")
			if plain.code != 0 {
				t.Errorf("pytest without --heaplens: exit %d\n%s%s", plain.code, plain.stdout, plain.stderr)
			}
			xmlPath := filepath.Join(venv, "junit.xml")
			checkPytestRun(t, runIn(t, project, nil, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--heaplens", "--junitxml", xmlPath), xmlPath)
		})
	}
}

// checkPytestRun checks a run of the sample project with pytest --heaplens
// and the junit report it wrote (xmlPath, on the host): exactly the
// expected tests fail, naming the expected frames.
func checkPytestRun(t *testing.T, r result, xmlPath string) {
	t.Helper()
	if r.code != 1 {
		t.Errorf("pytest --heaplens: exit %d, want 1 (tests failed)\n%s%s", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(xmlPath)
	if err != nil {
		t.Fatalf("no junit report: %v\n%s%s", err, r.stdout, r.stderr)
	}
	var rep junit
	if err := xml.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range rep.Cases {
		seen[c.Name] = true
		want, fails := pytestExpect[c.Name]
		switch {
		case c.Error != nil || c.Skipped != nil:
			t.Errorf("%s: error or skipped: %+v", c.Name, c)
		case fails && c.Failure == nil:
			t.Errorf("%s passed; it must fail", c.Name)
		case fails && !strings.Contains(c.Failure.Text, want):
			t.Errorf("%s: the failure does not name %q:\n%s", c.Name, want, c.Failure.Text)
		case fails && (strings.Contains(c.Failure.Text, "/_pytest/") || strings.Contains(c.Failure.Text, "/pluggy/")):
			t.Errorf("%s: the failure lists pytest's own frames (a stack that does not pass through the test is summed in a line):\n%s", c.Name, c.Failure.Text)
		case !fails && c.Failure != nil:
			t.Errorf("%s failed; it must pass:\n%s", c.Name, c.Failure.Text)
		}
	}
	for _, name := range append(pytestPasses, keys(pytestExpect)...) {
		if !seen[name] {
			t.Errorf("%s did not run", name)
		}
	}
	for _, want := range []string{"tests that leaked the most:", "test_openmp_leak_fails", "fill_cache (test_limits.py:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the session's heaplens table lacks %q:\n%s", want, r.stdout)
		}
	}
}

// theWheel is the wheel make wheel built.
func theWheel(t *testing.T) string {
	t.Helper()
	wheels, _ := filepath.Glob(filepath.Join(testenv.Root, "dist", "heaplens-*-py3-none-*manylinux_*_x86_64.whl"))
	if len(wheels) != 1 {
		t.Fatalf("want one wheel in dist/, found %v: run make wheel (make test does)", wheels)
	}
	return wheels[0]
}

// sampleProject copies the pytest plugin's sample project into dir.
func sampleProject(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"test_limits.py", "native.c"} {
		b, err := os.ReadFile(filepath.Join(testenv.Root, "test", "pytest_project", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// runIn is run with a working directory and extra environment.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v: still running after 5 minutes\n%s", name, args, errb.String())
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}
