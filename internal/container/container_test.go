package container

import (
	"os"
	"path/filepath"
	"testing"
)

// TestResolveIn: a process's links are followed inside its root, absolute
// ones included, and nothing leads above it.
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/lib", "etc", "opt/app"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	for link, to := range map[string]string{
		"lib":             "/usr/lib", // absolute: the host's /usr/lib if followed outside
		"usr/lib/libc.so": "libc-2.31.so",
		"etc/alt":         "../../../../etc/passwd", // above the root: stops at it
		"opt/app/loop":    "loop",
		"opt/app/py":      "/lib/libc.so",
	} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"/lib/libc.so", "/usr/lib/libc-2.31.so"},
		{"/usr/lib/libc.so", "/usr/lib/libc-2.31.so"},
		{"/etc/alt", "/etc/passwd"},
		{"/../../usr/./lib/../lib/x", "/usr/lib/x"},
		{"/opt/app/py", "/usr/lib/libc-2.31.so"},
		{"/missing/file", "/missing/file"},
	} {
		got, err := resolveIn(root, c.in)
		if err != nil || got != c.want {
			t.Errorf("resolveIn(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := resolveIn(root, "/opt/app/loop"); err == nil {
		t.Errorf("a link to itself resolved")
	}
	tg := &Target{Root: root}
	if got, want := tg.Path("/lib/libc.so"), root+"/usr/lib/libc-2.31.so"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	if got := (&Target{}).Path("/lib/libc.so"); got != "/lib/libc.so" {
		t.Errorf("beside heaplens, Path = %q", got)
	}
}

// TestOpenSelf: heaplens's own process is beside it: no root, no
// translation.
func TestOpenSelf(t *testing.T) {
	tg, err := Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tg.Foreign() || tg.HostPID(42) != 42 || tg.NSPID != os.Getpid() {
		t.Errorf("heaplens's own process seen as foreign: %+v", tg)
	}
}
