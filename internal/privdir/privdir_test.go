package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the uid another local user has in these tests.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test makes files of another user (chown to uid %d): run it as root", nobody)
	}
}

func TestCheck(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	cases := []struct {
		name  string
		setup func(p string) error
		want  string // in the error; "" = accepted
	}{
		{"private", func(p string) error { return os.Mkdir(p, 0o700) }, ""},
		{"traversable", func(p string) error { return os.Mkdir(p, 0o711) }, ""},
		{"readable by others", func(p string) error { return os.Mkdir(p, 0o755) }, ""},
		{"group-writable", func(p string) error { return mkdirMode(p, 0o775) }, "mode 0775"},
		{"other-writable sticky", func(p string) error { return mkdirMode(p, 0o777|os.ModeSticky) }, "mode 1777"},
		{"owned by another user", func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chown(p, nobody, nobody)
		}, "owned by"},
		{"symbolic link to a private directory", func(p string) error {
			return os.Symlink(base, p)
		}, "symbolic link"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(base, strings.ReplaceAll(c.name, " ", "-"))
			if err := c.setup(p); err != nil {
				t.Fatal(err)
			}
			err := Check(p)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Check(%s): %v, want accepted", p, err)
			case c.want != "" && (!errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p)):
				t.Errorf("Check(%s): %v, want ErrUnsafe naming the path and %q", p, err, c.want)
			}
		})
	}
}

func mkdirMode(p string, mode os.FileMode) error {
	if err := os.Mkdir(p, 0o700); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

// Ensure gives a new directory exactly its mode whatever the umask, and
// EnsureAll creates missing parents that others can only traverse.
func TestEnsureModeDespiteUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b", "c")
	if err := EnsureAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o755, filepath.Dir(dir): 0o711, filepath.Join(base, "a"): 0o711} {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().Perm() != want || !fi.IsDir() {
			t.Errorf("%s: %v %v, want a directory of mode %v (group/other write never given)", p, fi.Mode(), err, want)
		}
	}
	if err := Ensure(dir, 0o700); err != nil {
		t.Errorf("Ensure of an existing safe directory: %v", err)
	}
}

func TestResolve(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // the testing package makes it 0700
	os.Chmod(base, 0o755)
	open, sticky, private, other := filepath.Join(base, "open"), filepath.Join(base, "sticky"), filepath.Join(base, "private"), filepath.Join(base, "other")
	mkdirMode(open, 0o777)
	mkdirMode(sticky, 0o777|os.ModeSticky)
	mkdirMode(private, 0o700)
	mkdirMode(other, 0o755)
	os.Chown(other, nobody, nobody)
	link := filepath.Join(sticky, "link")
	os.Symlink(private, link)

	cases := []struct {
		dir       string
		resolved  string
		reachable bool
		want      string // in the error
	}{
		{filepath.Join(sticky, "x"), filepath.Join(sticky, "x"), true, ""},
		{filepath.Join(private, "x"), filepath.Join(private, "x"), false, ""},
		{filepath.Join(link, "x"), filepath.Join(private, "x"), false, ""},
		{filepath.Join(open, "x"), "", false, "mode 0777"},
		{filepath.Join(other, "x"), "", false, "owned by nobody"},
	}
	for _, c := range cases {
		got, reachable, err := Resolve(c.dir)
		if c.want != "" {
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Resolve(%s): %v, want ErrUnsafe with %q", c.dir, err, c.want)
			}
			continue
		}
		if err != nil || got != c.resolved || reachable != c.reachable {
			t.Errorf("Resolve(%s) = %s, %v, %v; want %s, %v", c.dir, got, reachable, err, c.resolved, c.reachable)
		}
	}
}

// CreateFile never writes through a planted name.
func TestCreateFile(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	theirs := filepath.Join(dir, "theirs")
	os.WriteFile(theirs, []byte("keep"), 0o666)
	os.Chown(theirs, nobody, nobody)
	os.Symlink(victim, filepath.Join(dir, "symlink"))
	os.Link(victim, filepath.Join(dir, "hardlink"))
	for _, name := range []string{"symlink", "hardlink", "theirs"} {
		f, err := CreateFile(filepath.Join(dir, name), 0o600)
		if err == nil {
			f.Close()
		}
		if !errors.Is(err, ErrUnsafe) {
			t.Errorf("CreateFile(%s): %v, want ErrUnsafe", name, err)
		}
	}
	for _, p := range []string{victim, theirs} {
		if b, _ := os.ReadFile(p); string(b) != "keep" {
			t.Errorf("%s was overwritten: %q", p, b)
		}
	}

	own := filepath.Join(dir, "own")
	os.WriteFile(own, []byte("old content"), 0o644)
	for _, p := range []string{own, filepath.Join(dir, "new")} {
		f, err := CreateFile(p, 0o600)
		if err != nil {
			t.Fatalf("CreateFile(%s): %v", p, err)
		}
		f.WriteString("new")
		f.Close()
		if b, _ := os.ReadFile(p); string(b) != "new" {
			t.Errorf("%s holds %q, want it truncated and rewritten", p, b)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "new")); fi.Mode().Perm() != 0o600 {
		t.Errorf("a new file has mode %v, want 0600", fi.Mode())
	}
}
