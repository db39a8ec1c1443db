package launch

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// ErrNotFound means the command does not exist.
var ErrNotFound = errors.New("command not found")

// ErrNotExecutable means the command names a file that cannot be run: a
// directory, or a file without execute permission.
var ErrNotExecutable = errors.New("cannot execute")

// ErrStatic means the program is statically linked: LD_PRELOAD cannot reach it.
var ErrStatic = errors.New("statically linked")

// Resolve finds the program as the shell would, and says, as the shell
// does, why a name with a slash cannot be run.
func Resolve(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	if strings.Contains(name, "/") {
		switch st, serr := os.Stat(name); {
		case serr == nil && st.IsDir():
			return "", fmt.Errorf("%w %s: it is a directory", ErrNotExecutable, name)
		case serr == nil:
			return "", fmt.Errorf("%w %s: permission denied (not executable)", ErrNotExecutable, name)
		case !errors.Is(serr, os.ErrNotExist):
			return "", fmt.Errorf("%s: %w", name, serr)
		}
	}
	return "", fmt.Errorf("%s: %w", name, ErrNotFound)
}

// CheckDynamic returns ErrStatic for a statically linked ELF program. Scripts
// (#!) run a dynamic interpreter and other files are left to the kernel.
func CheckDynamic(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := f.ReadAt(magic, 0); err != nil || string(magic) != "\x7fELF" {
		return nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil // let the kernel say what is wrong with it
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			return nil
		}
	}
	return fmt.Errorf("%s: %w", path, ErrStatic)
}
