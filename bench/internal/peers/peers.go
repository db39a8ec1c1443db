// Package peers installs and describes what the benchmarks compare heaplens
// with, and what their workloads need: Debian packages (heaptrack, GNU
// time, numpy, sqlite3, compilers) and memray in a venv under bench/.venv.
// It is idempotent, and a peer that cannot be installed is not an error:
// its reason is recorded and printed loudly, and the benchmark shows
// "n/a (reason)" instead of a number.
package peers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// SystemPython is the interpreter every Python workload runs on: Debian's,
// so that Debian's numpy is the one measured. The venv's python is a
// symlink to it.
const SystemPython = "/usr/bin/python3"

// Peers is what Setup found or installed: the versions measured, and why
// a peer is missing when it is.
type Peers struct {
	Python          string `json:"python"`
	Numpy           string `json:"numpy"`
	Memray          string `json:"memray,omitempty"`
	MemrayReason    string `json:"memray_unavailable,omitempty"`
	Heaptrack       string `json:"heaptrack,omitempty"`
	HeaptrackReason string `json:"heaptrack_unavailable,omitempty"`
	Sqlite          string `json:"sqlite3,omitempty"`
	SqliteReason    string `json:"sqlite3_unavailable,omitempty"`
	Cxx             string `json:"cxx,omitempty"`
	CxxReason       string `json:"cxx_unavailable,omitempty"`
	Valgrind        string `json:"valgrind,omitempty"`
	ValgrindReason  string `json:"valgrind_unavailable,omitempty"`
	Venv            string `json:"venv"`
	VenvPython      string `json:"-"`
}

// Want selects the optional parts.
type Want struct {
	Heaptrack bool // heaptrack from Debian
	Native    bool // g++ and sqlite3 for the native workloads
	Valgrind  bool // valgrind, to count instructions with callgrind
}

// Debian packages: the Python workloads need numpy, and venv and pip to
// install memray beside it; GNU time measures peak RSS.
var (
	basePackages   = []string{"python3-numpy", "python3-venv", "python3-pip", "time"}
	nativePackages = []string{"g++", "sqlite3"}
)

// Setup makes sure the Debian packages and the venv with memray exist, and
// installs what is missing. Only a failure to provide python3 + numpy + GNU
// time is an error.
func Setup(root string, want Want, log func(string, ...any)) (*Peers, error) {
	p := &Peers{Venv: filepath.Join(root, "bench", ".venv")}
	p.VenvPython = filepath.Join(p.Venv, "bin", "python")
	pkgs := append([]string(nil), basePackages...)
	if want.Native {
		pkgs = append(pkgs, nativePackages...)
	}
	if want.Heaptrack {
		pkgs = append(pkgs, "heaptrack")
	}
	if want.Valgrind {
		pkgs = append(pkgs, "valgrind")
	}
	failed := map[string]string{}
	if missing := MissingDebs(pkgs); len(missing) > 0 {
		log("installing %s with apt-get", strings.Join(missing, " "))
		if err := AptInstall(missing); err != nil {
			// Try one by one, so one package that cannot be had does not
			// cost the others.
			for _, m := range missing {
				if err := AptInstall([]string{m}); err != nil {
					failed[m] = err.Error()
					log("LOUD WARNING: cannot install %s: %v", m, err)
				}
			}
		}
	}
	for _, m := range basePackages {
		if r, ok := failed[m]; ok {
			return nil, fmt.Errorf("peers: %s is required: %s", m, r)
		}
	}
	if _, err := os.Stat(p.VenvPython); err != nil {
		log("creating %s", p.Venv)
		// --system-site-packages: Debian's numpy (in dist-packages) stays visible.
		if out, err := exec.Command(SystemPython, "-m", "venv", "--system-site-packages", p.Venv).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("peers: creating the venv: %v\n%s", err, out)
		}
	}
	var err error
	if p.Python, err = pyEval(p.VenvPython, "import platform; print(platform.python_version())"); err != nil {
		return nil, err
	}
	if p.Numpy, err = pyEval(p.VenvPython, "import numpy; print(numpy.__version__)"); err != nil {
		return nil, fmt.Errorf("peers: numpy is not importable from the venv: %v", err)
	}
	p.setupMemray(log)
	if want.Heaptrack {
		p.Heaptrack, p.HeaptrackReason = version("heaptrack", failed, "heaptrack", "--version")
	}
	if want.Native {
		p.Sqlite, p.SqliteReason = version("sqlite3", failed, "sqlite3", "--version")
		p.Cxx, p.CxxReason = version("g++", failed, "g++", "-dumpfullversion")
	}
	if want.Valgrind {
		p.Valgrind, p.ValgrindReason = version("valgrind", failed, "valgrind", "--version")
	}
	for _, r := range []string{p.MemrayReason, p.HeaptrackReason, p.SqliteReason, p.CxxReason, p.ValgrindReason} {
		if r != "" {
			log("LOUD WARNING: %s", r)
		}
	}
	return p, nil
}

func (p *Peers) setupMemray(log func(string, ...any)) {
	var err error
	if p.Memray, err = memrayVersion(p.VenvPython); err == nil {
		return
	}
	log("installing memray into %s with pip", p.Venv)
	out, perr := exec.Command(p.VenvPython, "-m", "pip", "install", "--disable-pip-version-check", "-q", "memray").CombinedOutput()
	if perr != nil {
		p.MemrayReason = "pip install memray failed: " + harness.LastLines(string(out), 3)
		return
	}
	if p.Memray, err = memrayVersion(p.VenvPython); err != nil {
		p.MemrayReason = "memray installed but not importable: " + err.Error()
	}
}

// versionWord finds a version number in a tool's --version output.
var versionWord = regexp.MustCompile(`\d+\.\d+(\.\d+)?`)

// version runs a tool to learn its version; when it cannot run, the
// reason names the failed install if there was one.
func version(pkg string, failed map[string]string, argv ...string) (string, string) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		if r, ok := failed[pkg]; ok {
			return "", fmt.Sprintf("%s: apt-get install failed: %s", pkg, harness.LastLines(r, 2))
		}
		return "", fmt.Sprintf("%s cannot run: %v", argv[0], err)
	}
	if v := versionWord.FindString(string(out)); v != "" {
		return v, ""
	}
	return strings.TrimSpace(harness.LastLines(string(out), 1)), ""
}

// memrayVersion is the installed memray's version, or an error when memray
// cannot be imported.
func memrayVersion(python string) (string, error) {
	return pyEval(python, "import importlib.metadata, memray; print(importlib.metadata.version('memray'))")
}

// pyEval runs a one-line program and returns its trimmed standard output.
func pyEval(python, code string) (string, error) {
	cmd := exec.Command(python, "-c", code)
	cmd.Env = harness.CleanEnv()
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s -c %q: %v: %s", python, code, err, harness.LastLines(string(ee.Stderr), 2))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// MissingDebs returns the packages dpkg does not report as installed.
func MissingDebs(pkgs []string) []string {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	return missing
}

// AptInstall installs pkgs, running apt-get update first when the package
// lists are empty (a fresh machine) or when a first attempt fails (stale lists).
func AptInstall(pkgs []string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s missing and not running as root: apt-get install -y %s", strings.Join(pkgs, " "), strings.Join(pkgs, " "))
	}
	update := func() error {
		out, err := aptGet("update")
		if err != nil {
			return fmt.Errorf("apt-get update: %v\n%s", err, harness.LastLines(out, 5))
		}
		return nil
	}
	if lists, _ := filepath.Glob("/var/lib/apt/lists/*_Packages*"); len(lists) == 0 {
		if err := update(); err != nil {
			return err
		}
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if _, err := aptGet(args...); err == nil {
		return nil
	}
	if err := update(); err != nil {
		return err
	}
	if out, err := aptGet(args...); err != nil {
		return fmt.Errorf("apt-get install %s: %v\n%s", strings.Join(pkgs, " "), err, harness.LastLines(out, 5))
	}
	return nil
}

func aptGet(args ...string) (string, error) {
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
