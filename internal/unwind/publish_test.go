package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two libraries, one of them wanted three times (twice by the same path,
// once through a link), and a path that does not exist: each table is
// written once, under its build ID, and nothing else is left.
func TestPublisher(t *testing.T) {
	libs := []string{smallLib, oracleFiles[0]}
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "librt-link.so")
	if err := os.Symlink(libs[0], link); err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(dir)
	p.Want(libs[0])
	p.Want(libs[0])
	p.Want(filepath.Join(dir, "no-such-file.so"))
	p.Want(libs[1])
	p.Want(link)
	p.Close()
	p.Close()
	p.Want(oracleFiles[1]) // after Close: ignored
	if w, f := p.Built(); w != 2 || f != 1 {
		t.Errorf("Built() = %d written, %d failed; want 2 and 1", w, f)
	}

	want := map[string]string{}
	for _, lib := range libs {
		f, err := elf.Open(lib)
		if err != nil {
			t.Fatal(err)
		}
		id, err := BuildID(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		want["unwind."+hex.EncodeToString(id)] = lib
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		lib, ok := want[e.Name()]
		if !ok {
			t.Errorf("%s: a file the Publisher should not have left", e.Name())
			continue
		}
		delete(want, e.Name())
		checkPublished(t, filepath.Join(dir, e.Name()), lib)
	}
	for name, lib := range want {
		t.Errorf("no %s for %s", name, lib)
	}
}

// A table is not written when it would take more than a quarter of the
// space free where the rings are.
func TestPublisherLeavesRoomForRings(t *testing.T) {
	tab, _, err := BuildFile(smallLib)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		free  uint64
		wrote int
	}{{4 * uint64(len(tab)), 1}, {4*uint64(len(tab)) - 1, 0}} {
		dir := t.TempDir()
		p := NewPublisher(dir)
		p.free = func(string) (uint64, error) { return tc.free, nil }
		p.Want(smallLib)
		p.Close()
		ents, _ := os.ReadDir(dir)
		if w, f := p.Built(); w != tc.wrote || f != 1-tc.wrote || len(ents) != tc.wrote {
			t.Errorf("%d-byte table, %d bytes free: %d written, %d failed, %d files; want %d written", len(tab), tc.free, w, f, len(ents), tc.wrote)
		}
	}
}

// checkPublished checks the table file at path against one built afresh.
func checkPublished(t *testing.T, path, lib string) {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, st.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !strings.HasSuffix(path, hex.EncodeToString(tab.ID)) {
		t.Errorf("%s holds the table of build ID %x", path, tab.ID)
	}
	fresh, _, err := BuildFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, fresh) {
		t.Errorf("%s is not the table of %s", path, lib)
	}
}

// Close with nothing wanted returns at once, and twice.
func TestPublisherIdle(t *testing.T) {
	p := NewPublisher(t.TempDir())
	p.Close()
	p.Close()
	if w, f := p.Built(); w != 0 || f != 0 {
		t.Errorf("Built() = %d, %d; want 0, 0", w, f)
	}
}

// A table built once is taken from the cache by the next run, under the
// same key; a cached file that is corrupt, of another build ID or of a file
// modified since is not used, and the table is built afresh.
func TestPublisherCache(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "librt.so") // a copy, whose modification time the test sets
	src, err := os.ReadFile(smallLib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, src, 0o600); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache", "unwind") // created by the first run
	run := func(what string, wantCached int) {
		t.Helper()
		dir := t.TempDir()
		p := NewPublisher(dir)
		p.Cache = cache
		p.Want(lib)
		p.Close()
		if w, f := p.Built(); w != 1 || f != 0 || p.Cached() != wantCached {
			t.Errorf("%s: %d written (%d from the cache), %d failed; want 1 written, %d from the cache", what, w, p.Cached(), f, wantCached)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Fatalf("%s: %d files in the run directory, want 1", what, len(ents))
		}
		checkPublished(t, filepath.Join(dir, ents[0].Name()), lib)
	}
	cached := func() string {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(cache, "*.unwind"))
		if len(m) != 1 {
			t.Fatalf("%d tables in the cache, want 1: %v", len(m), m)
		}
		return m[0]
	}

	run("first run", 0)
	if st, err := os.Stat(cache); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v, %v; want mode 0700", st.Mode(), err)
	}
	run("second run", 1)

	b, _ := os.ReadFile(cached())
	if err := os.WriteFile(cached(), b[:len(b)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	run("cached table cut short", 0)
	run("after it was rewritten", 1)

	other, _, err := BuildFile(oracleFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached(), other, 0o600); err != nil {
		t.Fatal(err)
	}
	run("another library's table under its name", 0)

	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(lib, later, later); err != nil {
		t.Fatal(err)
	}
	run("library modified since", 0)
	if m, _ := filepath.Glob(filepath.Join(cache, "*.unwind")); len(m) != 2 {
		t.Errorf("%d tables in the cache, want 2 (before and after the modification)", len(m))
	}
}
