//go:build !amd64

package inject

import "time"

// Result says how the library was loaded.
type Result struct {
	TID    int
	Pause  time.Duration
	Looked int
	Handle uint64
}

// Load fails with ErrArch.
func Load(pid int, lib string, slow func(string), check func(tid int) error) (*Result, error) {
	return nil, ErrArch
}

// Stopped fails with ErrArch.
func Stopped(tid int, fn func() error) error { return ErrArch }
