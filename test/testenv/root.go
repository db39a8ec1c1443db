package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Chroot is a Debian root that make caches outside the clone
// (scripts/debroot.sh): sid with the CPython versions newer than the
// machine's (make sidroot), bullseye with an older glibc (make oldroot).
type Chroot struct {
	Dir string // the root, as seen from the host
}

// SidRoot returns the sid root, failing t loudly when it is missing or when
// this process cannot chroot (it needs root).
func SidRoot(t testing.TB) (Chroot, bool) {
	t.Helper()
	return cachedRoot(t, "sid-py", "make sidroot", "Python 3.14/3.15 tests")
}

// OldRoot returns the Debian 11 root (glibc 2.31, python3.9, gcc-multilib,
// musl-tools), failing t loudly when it is missing or cannot be entered.
func OldRoot(t testing.TB) (Chroot, bool) {
	t.Helper()
	return cachedRoot(t, "bullseye", "make oldroot", "older-glibc (2.31) tests")
}

// ARMRoot returns the Debian 12 arm64 root (glibc 2.36, python3.11, gcc
// with libgomp), whose programs run through qemu-user, failing t loudly
// when it is missing or cannot be entered.
func ARMRoot(t testing.TB) (Chroot, bool) {
	t.Helper()
	return cachedRoot(t, "bookworm-arm64", "make armroot", "arm64 tests")
}

func cachedRoot(t testing.TB, name, target, what string) (Chroot, bool) {
	t.Helper()
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(cache, "heaplens", "roots", name)
	if _, err := os.Stat(filepath.Join(dir, ".heaplens-root")); err != nil {
		Missing(t, "no Debian root at %s (%s creates it; make test does): %s do NOT run", dir, target, what)
		return Chroot{}, false
	}
	if os.Geteuid() != 0 {
		Missing(t, "the root %s needs chroot, which needs root: %s do NOT run", dir, what)
		return Chroot{}, false
	}
	return Chroot{dir}, true
}

// RootPythons returns the interpreters of the sid root, with paths inside
// it; each missing one fails t.
func (r Chroot) RootPythons(t testing.TB) []Python {
	t.Helper()
	var found []Python
	for _, minor := range []int{14, 15} {
		p := fmt.Sprintf("/usr/bin/python3.%d", minor)
		if _, err := os.Stat(filepath.Join(r.Dir, p)); err != nil {
			Missing(t, "%s is missing in %s: its Python tests do NOT run", p, r.Dir)
			continue
		}
		found = append(found, Python{fmt.Sprintf("sid-3.%d", minor), p, minor})
	}
	return found
}

// TempDir makes a directory inside the root, removed when t ends, and
// returns its path on the host and inside the root.
func (r Chroot) TempDir(t testing.TB) (host, inside string) {
	t.Helper()
	host, err := os.MkdirTemp(filepath.Join(r.Dir, "tmp"), "heaplens-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	return host, r.Inside(host)
}

// Inside returns the path inside the root of a host path under r.Dir.
func (r Chroot) Inside(host string) string {
	return "/" + strings.TrimPrefix(strings.TrimPrefix(host, r.Dir), "/")
}

// Heaplens copies the static heaplens (make bin/heaplens-static: no cgo, so
// it runs on the root's glibc; libheaplens.so is inside it) into dir, a
// TempDir of the root, and returns its path inside the root.
func (r Chroot) Heaplens(t testing.TB, dir string) string {
	t.Helper()
	src := filepath.Join(Root, "bin", "heaplens-static")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("%s is missing: run `make bin/heaplens-static` (make test does): %v", src, err)
	}
	dst := filepath.Join(dir, "heaplens")
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return r.Inside(dst)
}

// Command runs args (paths inside the root) chrooted into r, in a mount
// namespace of its own where /proc and a tmpfs /dev/shm (the rings) are
// mounted, so that nothing is left mounted on the host when it ends.
func (r Chroot) Command(ctx context.Context, args ...string) *exec.Cmd {
	script := `mount -t proc proc "$0/proc" && mount -t tmpfs -o mode=1777 tmpfs "$0/dev/shm" && exec chroot "$0" "$@"`
	return exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private",
		"sh", "-c", script, r.Dir}, args...)...)
}
