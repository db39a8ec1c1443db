package unwind

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/heaplens/heaplens/internal/cachedir"
)

// The table cache keeps the tables built by earlier runs, one file per ELF
// file, so that a module's table reaches the library within a poll of its
// first stack rather than after a build (python3.11's: 13 ms, during which
// every stack through it is libgcc's). A file is named after the build ID
// and a hash of its key: the table format and builder versions and the
// path, size and modification time of the ELF file. Its contents are the
// table file itself, which Parse checks (the build ID included) before it
// is used.
const (
	// CacheEnv names the environment variable that overrides
	// DefaultCacheDir: "off" (or "0") disables the table cache, any other
	// value is its directory.
	CacheEnv = "HEAPLENS_UNWIND_CACHE"

	maxCachedTable  = 256 << 20 // above any table of maxRows rows
	maxCachedTables = 256       // files kept; the least recently used go first
)

// DefaultCacheDir is the table cache directory: $HEAPLENS_UNWIND_CACHE,
// else heaplens/unwind in the user cache directory, or "" (no cache).
func DefaultCacheDir() string { return cachedir.Dir(CacheEnv, "unwind") }

// Publisher writes the tables of module files into a run directory, as
// dir/unwind.<build ID in hex>, where the library looks for them. It builds
// in one background goroutine, one table at a time, so that asking never
// holds up the caller.
type Publisher struct {
	// Cache is the table cache directory ("": none); set it before the
	// first Want.
	Cache string

	dir  string
	wake chan struct{} // a path was queued or Close was called
	done chan struct{} // closed when the goroutine has returned

	mu      sync.Mutex
	queue   []string
	seen    map[string]bool // every path ever queued
	closed  bool
	started bool
	written int
	cached  int // of written, taken from the cache
	failed  int

	ids  map[string]bool                  // build IDs written; the goroutine's alone
	free func(dir string) (uint64, error) // bytes free to us in dir
}

func statfsFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// NewPublisher returns a Publisher that writes into dir. Its goroutine
// starts with the first Want.
func NewPublisher(dir string) *Publisher {
	return &Publisher{
		dir:  dir,
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
		seen: map[string]bool{},
		ids:  map[string]bool{},
		free: statfsFree,
	}
}

// Want asks for the table of the module file at path. It queues the path
// and returns at once. Each distinct path is built at most once (a path
// that failed is not tried again), each build ID written at most once, and
// nothing is queued after Close.
func (p *Publisher) Want(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.seen[path] {
		return
	}
	p.seen[path] = true
	p.queue = append(p.queue, path)
	if !p.started {
		p.started = true
		go p.run()
	}
	select {
	case p.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Close stops accepting paths and waits until those queued so far have
// been built and written. It may be called more than once.
func (p *Publisher) Close() {
	p.mu.Lock()
	p.closed = true
	started := p.started
	p.mu.Unlock()
	if !started {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	<-p.done
}

// Built returns how many tables have been written and how many paths
// could not be built or written.
func (p *Publisher) Built() (written, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.written, p.failed
}

// Cached returns how many of the tables written came from the cache.
func (p *Publisher) Cached() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cached
}

// run builds the queued paths until Close and an empty queue.
func (p *Publisher) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			<-p.wake
			continue
		}
		path := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()

		wrote, cached, err := p.publish(path)
		p.mu.Lock()
		if err != nil {
			p.failed++
		} else if wrote {
			p.written++
			if cached {
				p.cached++
			}
		}
		p.mu.Unlock()
	}
}

// publish builds the table of path, or takes it from the cache, and writes
// it, unless a table with its build ID was written already.
func (p *Publisher) publish(path string) (wrote, cached bool, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	// The build ID first: a second path to the same file needs no build.
	id, err := BuildID(f)
	if err != nil {
		return false, false, err
	}
	name := hex.EncodeToString(id)
	if p.ids[name] {
		return false, false, nil
	}
	cp := p.cachePath(path, name)
	table := cachedTable(cp, id)
	if cached = table != nil; !cached {
		if table, err = Build(f); err != nil {
			return false, false, err
		}
		if cp != "" && cachedir.Write(cp, table) == nil {
			cachedir.Prune(p.Cache, ".unwind", maxCachedTables)
		}
	}
	if err := p.write("unwind."+name, table); err != nil {
		return false, false, err
	}
	p.ids[name] = true
	return true, cached, nil
}

// cachePath is where the cache keeps the table of the file at path, whose
// build ID is name in hex; "" without a cache.
func (p *Publisher) cachePath(path, name string) string {
	if p.Cache == "" || !cachedir.ValidName(name) {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	st, err := os.Stat(abs)
	if err != nil {
		return ""
	}
	key := fmt.Sprintf("heaplens-unwind %d %d\x00%s\x00%d %d", version, builderVersion, abs, st.Size(), st.ModTime().UnixNano())
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(p.Cache, name+"-"+hex.EncodeToString(sum[:8])+".unwind")
}

// cachedTable returns the table at cp when it is a valid table for the
// build ID id, and marks it used; else nil.
func cachedTable(cp string, id []byte) []byte {
	if cp == "" {
		return nil
	}
	b, ok := cachedir.Read(cp, maxCachedTable)
	if !ok {
		return nil
	}
	if t, err := Parse(b); err != nil || !bytes.Equal(t.ID, id) {
		return nil
	}
	cachedir.Touch(cp)
	return b
}

// write writes b as dir/name, under a temporary name first so that the
// library never maps part of it (cachedir.Write). The directory is where the rings are
// (tmpfs, often small): a table never takes more than a quarter of what is
// free there, as a ring that cannot grow drops records.
func (p *Publisher) write(name string, b []byte) error {
	free, err := p.free(p.dir)
	if err != nil {
		return fmt.Errorf("unwind: %w", err)
	}
	if uint64(len(b)) > free/4 {
		return fmt.Errorf("unwind: %s: %d bytes, and %d are free in %s", name, len(b), free, p.dir)
	}
	return cachedir.Write(filepath.Join(p.dir, name), b) // mode 0600, renamed into place
}
