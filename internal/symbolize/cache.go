package symbolize

import (
	"path/filepath"
	"sync"
)

// Cache opens each path once and hands out the same *File afterwards. It
// remembers failures too, so a missing or non-ELF file (a deleted library,
// [vdso]) costs one attempt. A Cache is safe for concurrent use; opening
// happens under its lock.
type Cache struct {
	// DebugRoots, when non-nil, replaces the package's DebugRoots for
	// files opened by this cache. Set it before the first File call.
	DebugRoots []string

	// Dir is the symbol cache directory: lookups in files with a build ID
	// and DWARF are read from and, on Close, saved to a file there (see
	// diskcache.go). "" keeps nothing on disk. NewCache sets it to
	// DefaultCacheDir(); set it before the first File call.
	Dir string

	// Debuginfod, when not nil, is asked for the debug files no debug root
	// holds. NewCache sets it from DEBUGINFOD_URLS, keeping downloads in
	// Dir; set it before the first File call.
	Debuginfod *DebuginfodClient

	mu    sync.Mutex
	files map[string]cacheEntry
}

type cacheEntry struct {
	f   *File
	err error
}

// NewCache returns an empty cache that keeps lookups in DefaultCacheDir().
func NewCache() *Cache {
	c := &Cache{files: make(map[string]cacheEntry), Dir: DefaultCacheDir()}
	if c.Dir != "" {
		c.Debuginfod = NewDebuginfod(filepath.Join(c.Dir, "debuginfod"))
	}
	return c
}

// File returns the opened file at path, opening it on first use. A failed
// open is remembered and its error returned again.
func (c *Cache) File(path string) (*File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files == nil {
		c.files = make(map[string]cacheEntry)
	}
	if e, ok := c.files[path]; ok {
		return e.f, e.err
	}
	roots := c.DebugRoots
	if roots == nil {
		roots = DebugRoots
	}
	f, err := openWith(path, roots, c.Debuginfod)
	if f != nil {
		f.disk = newDiskFile(c.Dir, f)
	}
	c.files[path] = cacheEntry{f, err}
	return f, err
}

// Close closes every file the cache opened (saving their new lookups to the
// symbol cache) and empties it.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.files {
		if e.f != nil {
			e.f.Close()
		}
	}
	c.files = make(map[string]cacheEntry)
}
