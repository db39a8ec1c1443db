package symbolize

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// TestMain keeps the tests' symbol caches out of the user's cache
// directory: NewCache uses DefaultCacheDir, which honours CacheEnv.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "symcache-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(CacheEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var sampleEntries = map[uint64][]capture.Line{
	0x1000: {{Function: "inner", File: "a.c", Line: 6}, {Function: "outer", File: "a.c", Line: 14}},
	0x1010: {{Function: "outer", File: "a.c", Line: 15}},
	0x2000: nil, // nothing known: a valid entry
	0x2008: {{Function: "ns::f<int>()"}},
}

func TestCacheEncodeDecode(t *testing.T) {
	data := encodeCache("key", sampleEntries)
	got, err := decodeCache(data, "key")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sampleEntries) {
		t.Errorf("round trip: got %+v, want %+v", got, sampleEntries)
	}
	if _, err := decodeCache(data, "other key"); err == nil {
		t.Error("a file for another key was accepted")
	}
	empty, err := decodeCache(encodeCache("k", nil), "k")
	if err != nil || len(empty) != 0 {
		t.Errorf("empty cache: %v, %v", empty, err)
	}
}

// TestCacheDecodeCorrupt feeds damaged files: every one is rejected and
// none panics.
func TestCacheDecodeCorrupt(t *testing.T) {
	data := encodeCache("key", sampleEntries)
	for n := 0; n < len(data); n++ {
		if _, err := decodeCache(data[:n], "key"); err == nil {
			t.Errorf("truncated to %d of %d bytes: accepted", n, len(data))
		}
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x41
		if _, err := decodeCache(bad, "key"); err == nil {
			t.Errorf("byte %d flipped: accepted", i)
		}
	}
	// A valid checksum over nonsense (a newer or hostile writer) must not
	// panic or allocate absurdly either.
	for _, body := range [][]byte{
		[]byte(cacheMagic + "\x03key\xff\xff\xff\xff\x0f"),
		[]byte(cacheMagic + "\x03key\x00\x05\x00\x01\x07\x07\x00"),
		[]byte(cacheMagic + "\x03key\x01\x01a\x01\x00\x01\x00\x00\x80\x80\x80\x80\x80\x01"),
	} {
		withSum := encodeRaw(body)
		if _, err := decodeCache(withSum, "key"); err == nil {
			t.Errorf("nonsense %q accepted", body)
		}
	}
}

// encodeRaw appends the checksum encodeCache would to body.
func encodeRaw(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoliTable))
}

// TestDiskCacheRoundTrip runs the agent's sequence twice: open through a
// Cache, look up, close (save); the second Cache answers every lookup from
// disk, without loading DWARF, with the same frames.
func TestDiskCacheRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "symbols")
	bin := compile(t, dir, "dc", "c", "gcc", cSrc, "-g", "-O2", "-Wl,--build-id=sha1")
	addrs := sampleAddrs(t, bin, 3, cFuncs...)
	addrs = append(addrs, 0x1) // nothing there: cached as nil

	c1 := &Cache{Dir: cacheDir}
	f1, err := c1.File(bin)
	if err != nil {
		t.Fatal(err)
	}
	if f1.disk == nil {
		t.Fatal("a file with a build ID and DWARF got no disk cache")
	}
	want := map[uint64][]capture.Line{}
	for _, a := range addrs {
		want[a] = f1.Lookup(a)
	}
	c1.Close()
	files, _ := filepath.Glob(filepath.Join(cacheDir, "*.syms"))
	if len(files) != 1 {
		t.Fatalf("cache files after Close: %v", files)
	}

	c2 := &Cache{Dir: cacheDir}
	f2, err := c2.File(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if got := f2.Lookup(a); !reflect.DeepEqual(got, want[a]) {
			t.Errorf("%#x from the disk cache: %+v, want %+v", a, got, want[a])
		}
	}
	if f2.dwTried {
		t.Error("DWARF was loaded although every lookup was cached")
	}
	// A pc not in the cache loads DWARF and is added on Close.
	extra, _ := funcSym(t, bin, "outer")
	extra += 1
	if _, ok := want[extra]; ok {
		extra += 2
	}
	ref := f2.Lookup(extra)
	c2.Close()
	d := &diskFile{path: files[0], key: newDiskFile(cacheDir, mustOpen(t, bin)).key}
	if got, ok := d.get(extra); !ok || !reflect.DeepEqual(got, ref) {
		t.Errorf("new entry not saved: %+v %v, want %+v", got, ok, ref)
	}
}

func mustOpen(t *testing.T, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestDiskCacheKey: a cache written for other inputs (here: the DWARF file
// changed under the same build ID) is not used, and a corrupt file is
// ignored and replaced.
func TestDiskCacheKey(t *testing.T) {
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "symbols")
	bin := compile(t, dir, "key", "c", "gcc", cSrc, "-g", "-O2", "-Wl,--build-id=sha1")
	outer, _ := funcSym(t, bin, "outer")
	f := mustOpen(t, bin)
	d := newDiskFile(cacheDir, f)
	if d == nil {
		t.Fatal("no disk cache")
	}
	// A bogus result saved under the key of an older modification time.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(bin, old, old); err != nil {
		t.Fatal(err)
	}
	stale := newDiskFile(cacheDir, mustOpen(t, bin))
	if stale.key == d.key || stale.path == d.path {
		t.Fatal("the key does not depend on the DWARF file's modification time")
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		t.Fatal(err)
	}
	bogus := map[uint64][]capture.Line{outer: {{Function: "bogus"}}}
	// Written at the current key's path but with the stale key inside: a
	// name collision or a tampered file must not be trusted.
	if err := os.WriteFile(d.path, encodeCache(stale.key, bogus), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(bin, time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	c := &Cache{Dir: cacheDir}
	cf, err := c.File(bin)
	if err != nil {
		t.Fatal(err)
	}
	got := cf.Lookup(outer)
	if len(got) == 0 || got[0].Function == "bogus" {
		t.Fatalf("lookup used a cache file of another key: %+v", got)
	}
	c.Close()
	if e := readCacheFile(cachePath(t, cacheDir, bin), newDiskFile(cacheDir, mustOpen(t, bin)).key); e[outer] == nil {
		t.Errorf("cache file not rewritten with the current key: %+v", e)
	}

	// Garbage in the file: ignored, then replaced by a valid file.
	p := cachePath(t, cacheDir, bin)
	if err := os.WriteFile(p, []byte("not a cache file at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	c = &Cache{Dir: cacheDir}
	cf, _ = c.File(bin)
	if g := cf.Lookup(outer); !reflect.DeepEqual(g, got) {
		t.Errorf("after a corrupt cache file: %+v, want %+v", g, got)
	}
	c.Close()
	if e := readCacheFile(p, newDiskFile(cacheDir, mustOpen(t, bin)).key); !reflect.DeepEqual(e[outer], got) {
		t.Errorf("corrupt cache file not replaced: %+v", e)
	}
}

// cachePath is the cache file path of bin in dir (the current key).
func cachePath(t *testing.T, dir, bin string) string {
	t.Helper()
	return newDiskFile(dir, mustOpen(t, bin)).path
}

func TestDiskCacheIneligible(t *testing.T) {
	dir := t.TempDir()
	noID := compile(t, dir, "noid", "c", "gcc", cSrc, "-g", "-O2", "-Wl,--build-id=none")
	noDwarf := compile(t, dir, "nodwarf", "c", "gcc", cSrc, "-O2", "-Wl,--build-id=sha1")
	for _, p := range []string{noID, noDwarf} {
		c := &Cache{Dir: filepath.Join(dir, "symbols")}
		f, err := c.File(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.disk != nil {
			t.Errorf("%s: cached on disk (no build ID or no DWARF)", filepath.Base(p))
		}
		c.Close()
	}
	c := &Cache{}
	f, err := c.File(compile(t, dir, "nodir", "c", "gcc", cSrc, "-g", "-Wl,--build-id=sha1"))
	if err != nil || f.disk != nil {
		t.Errorf("a Cache without Dir keeps a disk cache: %v", err)
	}
	c.Close()
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv(CacheEnv, "off")
	if d := DefaultCacheDir(); d != "" {
		t.Errorf("%s=off: %q", CacheEnv, d)
	}
	t.Setenv(CacheEnv, "/some/dir")
	if d := DefaultCacheDir(); d != "/some/dir" {
		t.Errorf("%s=/some/dir: %q", CacheEnv, d)
	}
	t.Setenv(CacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if d := DefaultCacheDir(); d != "/xdg/heaplens/symbols" {
		t.Errorf("default: %q", d)
	}
}
