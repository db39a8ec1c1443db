package cachedir

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestDir(t *testing.T) {
	const env = "HEAPLENS_TEST_CACHE"
	for _, tc := range []struct{ value, xdg, want string }{
		{"off", "/xdg", ""},
		{"0", "/xdg", ""},
		{"/some/dir", "/xdg", "/some/dir"},
		{"", "/xdg", "/xdg/heaplens/kind"},
		{"", "/nonexistent-home/.cache", ""}, // a home that does not exist is not created
	} {
		t.Setenv(env, tc.value)
		t.Setenv("XDG_CACHE_HOME", tc.xdg)
		if got := Dir(env, "kind"); got != tc.want {
			t.Errorf("%s=%q XDG_CACHE_HOME=%q: %q, want %q", env, tc.value, tc.xdg, got, tc.want)
		}
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for i := 0; i < 10; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%02d.syms", i))
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := now.Add(-time.Duration(i) * time.Minute) // 00 is the newest
		os.Chtimes(p, mt, mt)
	}
	stale := filepath.Join(dir, ".tmp-x.syms-1")
	fresh := filepath.Join(dir, ".tmp-y.syms-2")
	for _, p := range []string{stale, fresh} {
		os.WriteFile(p, []byte("partial"), 0o600)
	}
	old := now.Add(-2 * staleTemp)
	os.Chtimes(stale, old, old)
	other := filepath.Join(dir, "README")
	os.WriteFile(other, []byte("not ours"), 0o600)
	otherKind := filepath.Join(dir, "old.unwind")
	os.WriteFile(otherKind, []byte("another suffix"), 0o600)
	os.Chtimes(otherKind, old, old)

	Prune(dir, ".syms", 4)
	left, _ := filepath.Glob(filepath.Join(dir, "*.syms"))
	var names []string
	for _, p := range left {
		names = append(names, filepath.Base(p))
	}
	if want := []string{"00.syms", "01.syms", "02.syms", "03.syms"}; !reflect.DeepEqual(names, want) {
		t.Errorf("kept %v, want %v", names, want)
	}
	for p, want := range map[string]bool{stale: false, fresh: true, other: true, otherKind: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists = %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

func TestWriteRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	p := filepath.Join(dir, "f.syms")
	for _, content := range []string{"first", "second, longer"} {
		if err := Write(p, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, ok := Read(p, 100); !ok || string(b) != content {
			t.Errorf("read %q, %v; want %q", b, ok, content)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the directory Write created: %v, %v; want mode 0700", st.Mode(), err)
	}
	if _, ok := Read(p, 5); ok {
		t.Error("Read returned a file longer than its limit")
	}
	if _, ok := Read(filepath.Join(dir, "missing"), 100); ok {
		t.Error("Read of a missing file succeeded")
	}
	// A directory others can write: nothing in it is trusted, nothing written to it.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, ok := Read(p, 100); ok {
		t.Error("Read trusted a file in a directory others can write")
	}
	if err := Write(p, []byte("x")); err == nil {
		t.Error("Write wrote into a directory others can write")
	}
}

func TestValidName(t *testing.T) {
	for _, id := range []string{"", "abc", "../../etc/passwd00", "ABCDEF0123456789", "0123456789abcdef"} {
		if got, want := ValidName(id), id == "0123456789abcdef"; got != want {
			t.Errorf("ValidName(%q) = %v, want %v", id, got, want)
		}
	}
}
