// Package cachedir keeps the files heaplens caches across runs (symbol
// lookups, unwind tables): each kind in its own directory under the user's
// cache directory, private to the user (internal/privdir), its files
// replaced atomically and the least recently used removed beyond a count.
// A cache is an optimisation only: every error reads as a miss. (Write
// also puts the unwind tables into a run's directory.)
package cachedir

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/privdir"
)

// staleTemp is the age past which a temporary file is taken for one left
// by a process that died while writing it.
const staleTemp = time.Hour

// Dir is the directory of the cache kind sub: the value of the environment
// variable env when it is set ("off" or "0": no cache, ""), else
// heaplens/sub in the user cache directory (os.UserCacheDir), or "" when
// that is not available or the home it is in does not exist.
func Dir(env, sub string) string {
	switch v := os.Getenv(env); v {
	case "off", "0":
		return ""
	case "":
	default:
		return v
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	// A home that does not exist (HOME=/nonexistent) is not created.
	if _, err := os.Stat(filepath.Dir(d)); err != nil {
		return ""
	}
	return filepath.Join(d, "heaplens", sub)
}

// Read returns the contents of the file at path when it is at most max
// bytes and its directory is private to the user (files another user could
// have planted are not trusted).
func Read(path string, max int64) ([]byte, bool) {
	if privdir.Check(filepath.Dir(path)) != nil {
		return nil, false
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(data)) > max {
		return nil, false
	}
	return data, true
}

// Touch marks the file at path as used now, so that Prune keeps it.
func Touch(path string) {
	now := time.Now()
	os.Chtimes(path, now, now)
}

// Write writes data as the file at path, creating its directory private to
// the user if it is missing (privdir.EnsureAll): to a temporary file beside
// it, then renamed over it, so that a reader sees a whole old or a whole
// new file.
func Write(path string, data []byte) error {
	if err := privdir.EnsureAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr == nil && cerr == nil {
		if err := os.Rename(tmp.Name(), path); err == nil {
			return nil
		} else {
			werr = err
		}
	}
	os.Remove(tmp.Name())
	if werr != nil {
		return werr
	}
	return cerr
}

// Prune keeps the keep most recently modified files of dir whose names end
// in suffix, and removes temporary files left by a process that died while
// writing.
func Prune(dir, suffix string, keep int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		name string
		mod  time.Time
	}
	var files []file
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-"):
			if time.Since(info.ModTime()) > staleTemp {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		case strings.HasSuffix(e.Name(), suffix):
			files = append(files, file{e.Name(), info.ModTime()})
		}
	}
	if len(files) <= keep {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.After(files[j].mod) })
	for _, f := range files[keep:] {
		os.Remove(filepath.Join(dir, f.name))
	}
}

// ValidName accepts the hex build IDs ELF notes carry, and nothing that
// could escape a cache directory when used in a file name.
func ValidName(id string) bool {
	if len(id) < 8 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
