// Package launch starts the target with libheaplens.so preloaded, drains its
// rings into a capture while it runs, and returns its exit status.
package launch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/heaplens/heaplens/internal/privdir"
	"golang.org/x/sys/unix"
)

// ErrNoLibrary means this binary was built without the preload library;
// ErrNoAttachLibrary, without the build of it that attach loads.
var (
	ErrNoLibrary       = errors.New("this heaplens was built without libheaplens.so: build it with `make` (it builds preload/ first)")
	ErrNoAttachLibrary = errors.New("this heaplens was built without libheaplens-attach.so, which heaplens attach loads: build it with `make` (it builds preload/ first)")
)

// LibraryPath extracts the embedded library to a content-addressed file and
// returns its path. A real file (not a memfd) survives children that close
// their descriptors and grandchildren that exec.
//
// The directory is heaplens's own and writable by no one else (see
// privdir), or the library could be swapped under the profiled program.
// It is 0711 and the file 0755, and every directory above it lets others
// through: a child that switches user (su, subprocess with user=) must be
// able to load the library, or its loader prints an error into the
// program's output. The user cache directory is used when that holds
// (typically not for a private home directory), else $TMPDIR/heaplens-UID.
func LibraryPath() (string, error) { return extract(libraryBytes(), "libheaplens-", ErrNoLibrary) }

// libraryBytes is the embedded library, or for tests the file that
// HEAPLENS_LIBRARY_FILE names (one built for a newer glibc, say, to check
// that heaplens then runs the command unprofiled).
func libraryBytes() []byte {
	if p := os.Getenv("HEAPLENS_LIBRARY_FILE"); p != "" {
		if b, err := os.ReadFile(p); err == nil {
			return b
		}
	}
	return library
}

// AttachLibraryPath is LibraryPath for libheaplens-attach.so, the build of
// the library that heaplens attach loads into a running process.
func AttachLibraryPath() (string, error) {
	return extract(attachLibraryBytes, "libheaplens-attach-", ErrNoAttachLibrary)
}

func extract(library []byte, prefix string, missing error) (string, error) {
	if len(library) == 0 {
		return "", missing
	}
	sum := sha256.Sum256(library)
	name := prefix + hex.EncodeToString(sum[:8]) + ".so"
	dir, err := libraryDir()
	if err != nil {
		return "", fmt.Errorf("launch: the preload library: %w", err)
	}
	path := filepath.Join(dir, name)
	if verifyLibrary(path, library, sum, uint32(os.Geteuid())) == nil {
		return path, nil
	}
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return "", fmt.Errorf("launch: extracting the preload library: %w", err)
	}
	_, werr := tmp.Write(library)
	if werr == nil {
		werr = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("launch: extracting the preload library to %s: %w", path, werr)
	}
	if err := verifyLibrary(path, library, sum, uint32(os.Geteuid())); err != nil {
		return "", fmt.Errorf("launch: the extracted preload library: %w", err)
	}
	return path, nil
}

// libraryDir picks and prepares the directory of the library: the user
// cache directory if others can reach it, else $TMPDIR/heaplens-UID. An
// unsafe directory of heaplens's own name is refused, not worked around.
func libraryDir() (string, error) {
	tmp := filepath.Join(os.TempDir(), fmt.Sprintf("heaplens-%d", os.Geteuid()))
	if d, err := os.UserCacheDir(); err == nil {
		// Only an existing cache directory: never create a home directory.
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dir, reachable, err := privdir.Resolve(filepath.Join(d, "heaplens"))
			// Not on a noexec mount, where the loader cannot map the library.
			if err == nil && reachable && preloadable(dir) && !noexec(d) {
				err := privdir.Ensure(dir, 0o711)
				if errors.Is(err, privdir.ErrUnsafe) {
					return "", err
				}
				if fi, serr := os.Stat(dir); err == nil && serr == nil && fi.Mode()&0o001 != 0 {
					return dir, nil
				}
			}
		}
	}
	dir, _, err := privdir.Resolve(tmp)
	if err != nil {
		return "", err
	}
	if !preloadable(dir) {
		return "", fmt.Errorf("%q cannot be named in LD_PRELOAD, which separates paths with colons and spaces: set TMPDIR to another directory", dir)
	}
	return dir, privdir.Ensure(dir, 0o711)
}

// preloadable reports whether LD_PRELOAD can name a file in dir.
func preloadable(dir string) bool {
	return filepath.IsAbs(dir) && !strings.ContainsAny(dir, ": \t\n")
}

// verifyLibrary checks that path is the embedded library: a regular file of
// owner's (ours, or in a rootless container the user heaplens wrote it as)
// that no one else can write, with its content.
func verifyLibrary(path string, library []byte, sum [32]byte, owner uint32) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != owner || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s: not a file of ours that only we can write", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, int64(len(library))+1)); err != nil {
		return err
	}
	if !bytes.Equal(h.Sum(nil), sum[:]) {
		return fmt.Errorf("%s: content differs from the embedded library", path)
	}
	return nil
}
