package container

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is a private directory heaplens made in the process's file system.
// heaplens reaches it through a descriptor (Host), so that no link the
// process's users change later can lead heaplens elsewhere.
type Dir struct {
	Inside string // its path as the process sees it
	Host   string // its path for heaplens: /proc/self/fd/N
	// Owner is the user its files belong to: heaplens's, or the process's
	// when heaplens's user has no uid in the user namespace of the file
	// system (a rootless container's, mounted in its user namespace).
	Owner  uint32
	asUser *owner // nil: heaplens's own user
	fd     int
	parent int
	name   string
}

// owner is a user heaplens creates files as.
type owner struct{ uid, gid int }

// as runs f on a thread of its own whose file-system user and group are
// o's: the thread ends with f, so that no other code runs as o.
func (o *owner) as(f func() error) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		unix.Setfsgid(o.gid)
		unix.Setfsuid(o.uid)
		if u, _ := unix.SetfsuidRetUid(-1); u != o.uid {
			done <- fmt.Errorf("cannot act as uid %d", o.uid)
			return
		}
		done <- f()
	}()
	return <-done
}

// Create writes a new file of b in the directory, with mode perm, and
// returns its path for heaplens.
func (d *Dir) Create(name string, b []byte, perm uint32) (string, error) {
	write := func() error {
		fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		_, err = f.Write(b)
		if err == nil {
			err = f.Chmod(os.FileMode(perm)) // whatever the umask took
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	var err error
	if d.asUser != nil {
		err = d.asUser.as(write)
	} else {
		err = write()
	}
	if err != nil {
		return "", fmt.Errorf("%s/%s: %w", d.Inside, name, err)
	}
	return d.Host + "/" + name, nil
}

// MakeDir creates a directory of heaplens's own, mode perm, in the first
// of parents (absolute paths of the process) that will take it: a
// directory, resolved inside the process's root, owned by root, heaplens's
// user or the process's, and writable by no one else unless it is sticky
// as /tmp is; with exec, not on a noexec mount (a library in it could not
// be mapped). The new directory is checked as privdir checks heaplens's
// own: a real directory of heaplens's user, with no group or other write.
func (t *Target) MakeDir(parents []string, perm uint32, exec bool) (*Dir, error) {
	if t.Root == "" {
		return nil, errors.New("container: the process sees heaplens's own files")
	}
	root, err := unix.Open(t.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the root of process %d: %w", t.PID, err)
	}
	defer unix.Close(root)
	var why []string
	for _, p := range parents {
		d, err := t.makeIn(root, p, perm, exec)
		if err == nil {
			return d, nil
		}
		why = append(why, err.Error())
	}
	return nil, fmt.Errorf("no directory of process %d takes heaplens's files: %s", t.PID, strings.Join(why, "; "))
}

func (t *Target) makeIn(root int, parent string, perm uint32, exec bool) (*Dir, error) {
	pfd, err := unix.Openat2(root, parent, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", parent, err)
	}
	d := &Dir{fd: -1, parent: pfd}
	if err := t.checkParent(parent, pfd, exec); err != nil {
		d.close()
		return nil, err
	}
	var b [8]byte
	rand.Read(b[:])
	d.name = "heaplens-" + hex.EncodeToString(b[:])
	d.Owner = uint32(os.Geteuid())
	err = unix.Mkdirat(pfd, d.name, 0o700)
	if errors.Is(err, unix.EOVERFLOW) {
		// heaplens's user has no uid in the file system's user namespace:
		// the process's user (its owner there) creates it.
		var st unix.Stat_t
		if err = unix.Stat(fmt.Sprintf("/proc/%d", t.PID), &st); err == nil {
			d.asUser, d.Owner = &owner{int(st.Uid), int(st.Gid)}, st.Uid
			err = d.asUser.as(func() error { return unix.Mkdirat(pfd, d.name, 0o700) })
		}
	}
	if err != nil {
		d.close()
		return nil, fmt.Errorf("%s: %w", parent, err)
	}
	d.Inside = strings.TrimSuffix(parent, "/") + "/" + d.name
	if d.fd, err = unix.Openat(pfd, d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		unix.Unlinkat(pfd, d.name, unix.AT_REMOVEDIR)
		d.close()
		return nil, fmt.Errorf("%s: %w", d.Inside, err)
	}
	var st unix.Stat_t
	if err = unix.Fstat(d.fd, &st); err == nil && (st.Uid != d.Owner || st.Mode&0o022 != 0) {
		err = fmt.Errorf("%s: not heaplens's own private directory (uid %d, mode %04o)", d.Inside, st.Uid, st.Mode&0o7777)
	}
	if err == nil {
		err = unix.Fchmod(d.fd, perm&^0o022) // whatever the umask took
	}
	if err != nil {
		d.Remove()
		return nil, err
	}
	d.Host = fmt.Sprintf("/proc/self/fd/%d", d.fd)
	return d, nil
}

// checkParent: a parent another user could write to would let that user
// rename heaplens's directory away and put another in its place.
func (t *Target) checkParent(parent string, fd int, exec bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", parent, err)
	}
	var owner unix.Stat_t
	unix.Stat(fmt.Sprintf("/proc/%d", t.PID), &owner)
	mode := st.Mode & 0o7777
	switch {
	case st.Uid != 0 && st.Uid != uint32(os.Geteuid()) && st.Uid != owner.Uid:
		return fmt.Errorf("%s belongs to uid %d, neither root, heaplens's user nor the process's", parent, st.Uid)
	case mode&0o022 != 0 && mode&unix.S_ISVTX == 0:
		return fmt.Errorf("%s has mode %04o: others can write to it and it is not sticky", parent, mode)
	}
	if exec {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil {
			return fmt.Errorf("%s: %w", parent, err)
		}
		if fs.Flags&unix.ST_NOEXEC != 0 {
			return fmt.Errorf("%s is on a noexec mount", parent)
		}
	}
	return nil
}

// Remove deletes the directory and what is in it (files only: heaplens
// makes no directories in it), and closes its descriptors.
// removeTries bounds the rounds of Remove: a fork storm adds a ring file
// now and then, not for ever (the directory is gone once removed, so a
// child that comes later finds none to write into).
const removeTries = 100

func (d *Dir) Remove() error {
	if d.parent < 0 {
		return nil
	}
	var errs []error
	// A process forked as the session ends may put its ring file in the
	// directory after it was read: read it again until it is gone.
	for try := 0; try < removeTries; try++ {
		errs = errs[:0]
		if d.fd >= 0 {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", d.fd)); err == nil {
				for _, e := range ents {
					if err := unix.Unlinkat(d.fd, e.Name(), 0); err != nil && !errors.Is(err, unix.ENOENT) {
						errs = append(errs, fmt.Errorf("%s/%s: %w", d.Inside, e.Name(), err))
					}
				}
			}
		}
		err := unix.Unlinkat(d.parent, d.name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", d.Inside, err))
		if !errors.Is(err, unix.ENOTEMPTY) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	d.close()
	return errors.Join(errs...)
}

func (d *Dir) close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
	if d.parent >= 0 {
		unix.Close(d.parent)
		d.parent = -1
	}
}
