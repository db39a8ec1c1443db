package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nobody is the other local user of these tests.
const nobody = 65534

// sharedTmp returns a fresh directory like /tmp (sticky, writable by all,
// reachable by others) for TMPDIR, so that a test controls what is in it.
func sharedTmp(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test plays another local user (chown to uid %d, su): run it as root", nobody)
	}
	d, err := os.MkdirTemp("", "hl-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}

// envWith is the test's environment without HOME, XDG_CACHE_HOME and
// TMPDIR, plus extra.
func envWith(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "HOME", "XDG_CACHE_HOME", "TMPDIR":
		default:
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// A directory for the library that another user owns, has replaced by a
// symbolic link or can write to is refused before the command starts, with
// a message that names it and says what to do.
func TestUnsafeLibraryDirRefused(t *testing.T) {
	hl := heaplensBin(t)
	libDir := "heaplens-" + strconv.Itoa(os.Geteuid())
	cases := []struct {
		name  string
		setup func(t *testing.T, tmp string) error
		want  string
	}{
		{"owned by another user", func(t *testing.T, tmp string) error {
			p := filepath.Join(tmp, libDir)
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.Chown(p, nobody, nobody)
		}, "is owned by nobody (uid 65534)"},
		{"symbolic link", func(t *testing.T, tmp string) error {
			return os.Symlink(t.TempDir(), filepath.Join(tmp, libDir))
		}, "is a symbolic link"},
		{"group-writable", func(t *testing.T, tmp string) error {
			p := filepath.Join(tmp, libDir)
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chmod(p, 0o775)
		}, "has mode 0775"},
		{"TMPDIR writable by all, not sticky", func(t *testing.T, tmp string) error {
			return os.Chmod(tmp, 0o777)
		}, "has mode 0777"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmp := sharedTmp(t)
			if err := c.setup(t, tmp); err != nil {
				t.Fatal(err)
			}
			marker := filepath.Join(t.TempDir(), "started")
			res := runEnv(t, time.Minute, envWith("TMPDIR="+tmp, "HOME=/nonexistent"), hl,
				"run", "-q", "-o", filepath.Join(t.TempDir(), "c.hlc"), "--", "touch", marker)
			if res.code == 0 || !strings.Contains(res.stderr, c.want) || !strings.Contains(res.stderr, tmp) {
				t.Errorf("exit %d, stderr %q: want non-zero and a message naming %s with %q", res.code, res.stderr, tmp, c.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the command was started")
			}
		})
	}
}

// Without a usable home (service accounts) heaplens works from private
// directories under TMPDIR, and creates nothing at the missing home.
func TestNoHome(t *testing.T) {
	hl := heaplensBin(t)
	bin := build(t, t.TempDir(), "leaky.c")
	for _, home := range []string{"", "HOME=/nonexistent"} {
		t.Run(map[string]string{"": "HOME unset"}[home]+home, func(t *testing.T) {
			tmp := sharedTmp(t)
			env := envWith("TMPDIR=" + tmp)
			if home != "" {
				env = append(env, home)
			}
			capPath := filepath.Join(t.TempDir(), "c.hlc")
			res := runEnv(t, time.Minute, env, hl, "run", "-q", "--rate", "64KiB", "-o", capPath, "--", bin)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			if report(t, capPath, "leaks").total() == 0 {
				t.Errorf("nothing profiled")
			}
			if _, err := os.Stat("/nonexistent"); err == nil {
				t.Errorf("/nonexistent was created")
			}
			dir := filepath.Join(tmp, "heaplens-"+strconv.Itoa(os.Geteuid()))
			libs, _ := filepath.Glob(filepath.Join(dir, "libheaplens-*.so"))
			if m := mode(dir); m != os.ModeDir|0o711 || len(libs) != 1 {
				t.Fatalf("%s: mode %v, libraries %v: want a 0711 directory with the library", dir, m, libs)
			}
			if m := mode(libs[0]); m != 0o755 {
				t.Errorf("%s has mode %v, want 0755", libs[0], m)
			}
			if m := mode(capPath); m != 0o600 {
				t.Errorf("the capture has mode %v, want 0600", m)
			}
		})
	}
}

// A child that switches user loads the library from where it can read it:
// no loader error in the command's output, even when the user's home is
// private.
func TestChildSwitchingUser(t *testing.T) {
	hl := heaplensBin(t)
	home := t.TempDir() // 0700, as root's and many users' homes
	os.Mkdir(filepath.Join(home, ".cache"), 0o755)
	env := envWith("HOME="+home, "TMPDIR="+sharedTmp(t))
	prog := []string{"/usr/bin/python3", "-c", "import subprocess; subprocess.run(['/bin/echo', 'hi'], user='nobody')"}
	bare := runEnv(t, time.Minute, env, prog[0], prog[1:]...)
	if bare.code != 0 || bare.stdout != "hi\n" {
		t.Fatalf("bare: exit %d, %q %q", bare.code, bare.stdout, bare.stderr)
	}
	res := runEnv(t, time.Minute, env, hl, append([]string{"run", "-q", "-o", filepath.Join(t.TempDir(), "c.hlc"), "--"}, prog...)...)
	if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
		t.Errorf("under heaplens: exit %d, stdout %q, stderr %q; want as bare %d, %q, %q", res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
	}
}

// A capture name planted as a symbolic link is not written through.
func TestCaptureSymlinkRefused(t *testing.T) {
	hl := heaplensBin(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	capPath := filepath.Join(dir, "c.hlc")
	os.Symlink(victim, capPath)
	res := run(t, time.Minute, hl, "run", "-q", "-o", capPath, "--", "echo", "hi")
	if res.stdout != "hi\n" || !strings.Contains(res.stderr, "symbolic link") {
		t.Errorf("exit %d, stdout %q, stderr %q: want the command run and the link refused", res.code, res.stdout, res.stderr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was overwritten: %q", b)
	}
}

// mode is path's mode, symbolic links not followed; 0 if it is missing.
func mode(path string) os.FileMode {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	return fi.Mode()
}
