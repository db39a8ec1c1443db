package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debPackages are the Debian packages the Python benchmark needs: numpy for
// the numpy workload, venv and pip to install memray beside it, and GNU
// time to measure the peak RSS of a process tree.
var debPackages = []string{"python3-numpy", "python3-venv", "python3-pip", "time"}

// systemPython is the interpreter every workload runs on: Debian's, so that
// Debian's numpy is the one measured. The venv's python is a symlink to it.
const systemPython = "/usr/bin/python3"

// Peers is what setup found or installed: the versions measured, and why
// memray is missing when it is.
type Peers struct {
	Python       string `json:"python"`
	Numpy        string `json:"numpy"`
	Memray       string `json:"memray,omitempty"`
	MemrayReason string `json:"memray_unavailable,omitempty"`
	Venv         string `json:"venv"`
	venvPython   string
}

// setup makes sure the Debian packages and the venv with memray exist, and
// installs what is missing. It is idempotent: a second call installs
// nothing. Only a failure to provide python3 + numpy is an error; a memray
// that cannot be installed is recorded in MemrayReason.
func setup(root string, log func(string, ...any)) (*Peers, error) {
	if missing := missingDebs(debPackages); len(missing) > 0 {
		log("installing %s with apt-get", strings.Join(missing, " "))
		if err := aptInstall(missing); err != nil {
			return nil, err
		}
	}
	p := &Peers{Venv: filepath.Join(root, "bench", ".venv")}
	p.venvPython = filepath.Join(p.Venv, "bin", "python")
	if _, err := os.Stat(p.venvPython); err != nil {
		log("creating %s", p.Venv)
		// --system-site-packages: Debian's numpy (in dist-packages) stays visible.
		if out, err := exec.Command(systemPython, "-m", "venv", "--system-site-packages", p.Venv).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("creating the venv: %v\n%s", err, out)
		}
	}
	var err error
	if p.Python, err = pyEval(p.venvPython, "import platform; print(platform.python_version())"); err != nil {
		return nil, err
	}
	if p.Numpy, err = pyEval(p.venvPython, "import numpy; print(numpy.__version__)"); err != nil {
		return nil, fmt.Errorf("numpy is not importable from the venv: %v", err)
	}
	if p.Memray, err = memrayVersion(p.venvPython); err != nil {
		log("installing memray into %s with pip", p.Venv)
		out, perr := exec.Command(p.venvPython, "-m", "pip", "install", "--disable-pip-version-check", "-q", "memray").CombinedOutput()
		if perr != nil {
			p.MemrayReason = "pip install memray failed: " + lastLines(string(out), 3)
			log("%s", p.MemrayReason)
			return p, nil
		}
		if p.Memray, err = memrayVersion(p.venvPython); err != nil {
			p.MemrayReason = "memray installed but not importable: " + err.Error()
		}
	}
	return p, nil
}

// memrayVersion is the installed memray's version, or an error when memray
// cannot be imported.
func memrayVersion(python string) (string, error) {
	return pyEval(python, "import importlib.metadata, memray; print(importlib.metadata.version('memray'))")
}

// pyEval runs a one-line program and returns its trimmed standard output.
func pyEval(python, code string) (string, error) {
	cmd := exec.Command(python, "-c", code)
	cmd.Env = cleanEnv(nil)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s -c %q: %v: %s", python, code, err, lastLines(string(ee.Stderr), 2))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// missingDebs returns the packages dpkg does not report as installed.
func missingDebs(pkgs []string) []string {
	var missing []string
	for _, p := range pkgs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	return missing
}

// aptInstall installs pkgs, running apt-get update first when the package
// lists are empty (a fresh machine) or when a first attempt fails (stale lists).
func aptInstall(pkgs []string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s missing and not running as root: apt-get install -y %s", strings.Join(pkgs, " "), strings.Join(pkgs, " "))
	}
	update := func() error {
		out, err := aptGet("update")
		if err != nil {
			return fmt.Errorf("apt-get update: %v\n%s", err, lastLines(out, 5))
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
		return fmt.Errorf("apt-get install %s: %v\n%s", strings.Join(pkgs, " "), err, lastLines(out, 5))
	}
	return nil
}

func aptGet(args ...string) (string, error) {
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// lastLines returns the last n non-empty lines of s, joined by " / ".
func lastLines(s string, n int) string {
	var ls []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " / ")
}
