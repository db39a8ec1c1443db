package launch

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestLibraryPathIsContentAddressed(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	p1, err := LibraryPath()
	if err != nil {
		t.Fatal(err)
	}
	p2, err := LibraryPath()
	if err != nil || p1 != p2 {
		t.Fatalf("second extraction: %q, %v; want the same file %q", p2, err, p1)
	}
	b, err := os.ReadFile(p1)
	if err != nil || !bytes.Equal(b, library) {
		t.Fatalf("extracted file differs from the embedded library (err %v)", err)
	}
	// A damaged cache file is replaced, not trusted.
	os.WriteFile(p1, []byte("garbage"), 0o755)
	p3, err := LibraryPath()
	if b, _ := os.ReadFile(p3); err != nil || !bytes.Equal(b, library) {
		t.Fatalf("a damaged cache file was not replaced: %v", err)
	}
}

func TestCheckDynamic(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	os.WriteFile(src, []byte("int main(void){return 0;}\n"), 0o644)
	dyn, static := filepath.Join(dir, "dyn"), filepath.Join(dir, "static")
	for _, c := range [][]string{{"-o", dyn, src}, {"-static", "-o", static, src}} {
		if out, err := exec.Command("gcc", c...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", c, err, out)
		}
	}
	script := filepath.Join(dir, "s.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if err := CheckDynamic(dyn); err != nil {
		t.Errorf("dynamic binary: %v", err)
	}
	if err := CheckDynamic(script); err != nil {
		t.Errorf("script: %v", err)
	}
	if err := CheckDynamic(static); !errors.Is(err, ErrStatic) {
		t.Errorf("static binary: %v, want ErrStatic", err)
	}
	if _, err := Resolve("no-such-command-heaplens"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve of a missing command: %v", err)
	}
}

func TestProfiledEnv(t *testing.T) {
	env := profiledEnv([]string{"PATH=/bin", "LD_PRELOAD=/other.so", "HEAPLENS_RATE=7"}, "/c/lib.so", "/dev/shm/x",
		Options{Rate: 4096, Seed: 9, RingSize: 1 << 20})
	got := strings.Join(env, " ")
	for _, want := range []string{"PATH=/bin", "LD_PRELOAD=/c/lib.so:/other.so", "HEAPLENS_DIR=/dev/shm/x",
		"HEAPLENS_RATE=4096", "HEAPLENS_SEED=9", "HEAPLENS_RING_SIZE=1048576"} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("env %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "HEAPLENS_RATE=7") {
		t.Errorf("an inherited HEAPLENS_ variable survived: %q", got)
	}
}

// LD_PRELOAD separates paths with colons and spaces: a cache directory
// whose name has them is passed over, a TMPDIR whose name has them refused.
func TestLibraryPathPreloadable(t *testing.T) {
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // reachable, so only the name decides
	os.Chmod(base, 0o755)
	cache, tmp, spaced := filepath.Join(base, "a:b"), filepath.Join(base, "tmp"), filepath.Join(base, "t m p")
	for _, d := range []string{cache, tmp, spaced} {
		os.Mkdir(d, 0o755)
	}
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("TMPDIR", tmp)
	p, err := LibraryPath()
	if err != nil || filepath.Dir(p) != filepath.Join(tmp, "heaplens-"+strconv.Itoa(os.Geteuid())) {
		t.Errorf("LibraryPath() = %q, %v; want it under %s", p, err, tmp)
	}
	t.Setenv("TMPDIR", spaced)
	if p, err := LibraryPath(); err == nil || !strings.Contains(err.Error(), "LD_PRELOAD") {
		t.Errorf("LibraryPath() with TMPDIR %q = %q, %v; want an error about LD_PRELOAD", spaced, p, err)
	}
}
