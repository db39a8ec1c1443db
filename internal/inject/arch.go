package inject

import "errors"

// ErrArch is the error of attaching where no injector exists: heaplens
// attach runs on x86-64 only (docs/platforms.md); heaplens run works on
// arm64 too.
var ErrArch = errors.New("attach is x86-64 only: on arm64 it is not supported yet (ptrace does not work under qemu-user, where arm64 is tested); heaplens run works there")
