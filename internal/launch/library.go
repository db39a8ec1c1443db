// Package launch starts the target with libheaplens.so preloaded, drains its
// rings into a capture while it runs, and returns its exit status.
package launch

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// The Makefile builds preload/ into this file before the Go build.
//
//go:embed libheaplens.so
var library []byte

// LibraryPath extracts the embedded library to a content-addressed file and
// returns its path. A real file (not a memfd) survives children that close
// their descriptors and grandchildren that exec.
func LibraryPath() (string, error) {
	sum := sha256.Sum256(library)
	name := "libheaplens-" + hex.EncodeToString(sum[:8]) + ".so"
	var dirs []string
	if d, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "heaplens"))
	}
	dirs = append(dirs, filepath.Join(os.TempDir(), fmt.Sprintf("heaplens-%d", os.Getuid())))
	var lastErr error
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, library) {
			return path, nil
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			lastErr = err
			continue
		}
		tmp, err := os.CreateTemp(dir, name+".tmp*")
		if err != nil {
			lastErr = err
			continue
		}
		_, werr := tmp.Write(library)
		cerr := tmp.Close()
		if werr == nil && cerr == nil {
			if err := os.Chmod(tmp.Name(), 0o755); err == nil {
				if err := os.Rename(tmp.Name(), path); err == nil {
					return path, nil
				}
			}
		}
		os.Remove(tmp.Name())
		lastErr = fmt.Errorf("writing %s: %v %v", path, werr, cerr)
	}
	return "", fmt.Errorf("launch: cannot extract the preload library: %w", lastErr)
}
