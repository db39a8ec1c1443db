// Package privdir creates and checks the directories heaplens writes into.
// A directory that another user can write to, or that another user owns or
// has replaced by a symbolic link, would let that user swap the library
// heaplens preloads into the profiled program (and so run code as its
// user), or plant rings and symbol caches. Every directory heaplens writes
// into is therefore owned by the current user, not a symbolic link and not
// writable by group or others; a directory that is not is refused with an
// error that names it, says what was found and what to do.
package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is wrapped by the errors for directories that fail the checks.
var ErrUnsafe = errors.New("unsafe")

// Ensure makes sure dir is a directory owned by the current user, not a
// symbolic link and writable by no one else, creating it with perm if it is
// missing (its parent must exist). perm's group and other write bits are
// never set.
func Ensure(dir string, perm fs.FileMode) error {
	perm &^= 0o022
	created := true
	if err := os.Mkdir(dir, perm); errors.Is(err, fs.ErrExist) {
		created = false
	} else if err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	fd, st, err := open(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := checkStat(dir, st, true); err != nil {
		return err
	}
	// The umask may have removed bits others need (traversing 0711).
	if created && st.Mode&0o777 != uint32(perm) {
		if err := unix.Fchmod(fd, uint32(perm)); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	return nil
}

// EnsureAll is Ensure for dir and every missing parent; parents are created
// 0711: others may traverse them, not list or write them.
func EnsureAll(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	if _, err := os.Lstat(dir); err != nil && errors.Is(err, fs.ErrNotExist) {
		if parent := filepath.Dir(dir); parent != dir {
			if err := EnsureAll(parent, 0o711); err != nil {
				return err
			}
		}
	}
	return Ensure(dir, perm)
}

// Check verifies dir without following a symbolic link in its last
// component: opened with O_NOFOLLOW|O_DIRECTORY and checked with fstat, so
// that what is checked is what was opened.
func Check(dir string) error {
	fd, st, err := open(dir)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return checkStat(dir, st, true)
}

// open opens the directory dir itself, never what a symbolic link there
// points to, and stats it.
func open(dir string) (int, *unix.Stat_t, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return -1, nil, fmt.Errorf("%w: %s is a symbolic link; heaplens writes only into real directories it owns: remove it (rm %s)", ErrUnsafe, dir, dir)
		}
		return -1, nil, fmt.Errorf("%s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%s: %w", dir, err)
	}
	return fd, &st, nil
}

// checkStat refuses what another user owns or can write to. own means the
// directory must be the current user's (an ancestor may be root's too).
func checkStat(dir string, st *unix.Stat_t, own bool) error {
	uid := uint32(os.Geteuid())
	mode := st.Mode & 0o7777
	switch {
	case st.Uid != uid && (own || st.Uid != 0):
		return fmt.Errorf("%w: %s is owned by %s, not by you, %s: another user could replace what heaplens puts there; remove it or set TMPDIR (or XDG_CACHE_HOME) to a directory of your own",
			ErrUnsafe, dir, userName(st.Uid), userName(uid))
	case mode&0o022 != 0 && (own || mode&unix.S_ISVTX == 0):
		return fmt.Errorf("%w: %s has mode %04o: group or others can write to it; make it private (chmod go-w %s) or set TMPDIR (or XDG_CACHE_HOME) to a private directory",
			ErrUnsafe, dir, mode, dir)
	}
	return nil
}

// Resolve returns dir with the symbolic links above it resolved, so that a
// link cannot be pointed elsewhere after the checks, and verifies the
// directories above it: each must belong to root or the current user and be
// writable by no one else, unless it is sticky as /tmp is (an entry there can
// only be replaced by its owner, and the entry itself is then checked).
// reachable tells whether every directory above dir lets others traverse it.
func Resolve(dir string) (resolved string, reachable bool, err error) {
	dir = filepath.Clean(dir)
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return "", false, err
	}
	reachable = true
	for p := parent; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return "", false, fmt.Errorf("%s: %w", p, err)
		}
		if err := checkStat(p, &st, false); err != nil {
			return "", false, err
		}
		if st.Mode&0o001 == 0 {
			reachable = false
		}
		if p == "/" || p == "." {
			break
		}
	}
	return filepath.Join(parent, filepath.Base(dir)), reachable, nil
}

// CreateFile creates or truncates path for writing, mode perm when new. It
// refuses a symbolic link, a file of someone else and a file with other
// hard links (O_NOFOLLOW, then fstat before truncating), so that a name
// planted in a shared directory cannot make heaplens overwrite another file.
func CreateFile(path string, perm fs.FileMode) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link; not overwriting what it points to", ErrUnsafe, path)
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	case st.Uid != uint32(os.Geteuid()) || st.Nlink != 1:
		f.Close()
		return nil, fmt.Errorf("%w: %s belongs to %s or has other hard links; not overwriting it", ErrUnsafe, path, userName(st.Uid))
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// userName says "uid N (name)", or "uid N" for a uid without a name.
func userName(uid uint32) string {
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		return u.Username + " (uid " + s + ")"
	}
	return "uid " + s
}
