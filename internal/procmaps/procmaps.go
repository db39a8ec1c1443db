// Package procmaps reads a process's memory map (/proc/PID/maps) and its
// memory (/proc/PID/mem), for heaplens attach.
package procmaps

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Offset     uint64
	Dev        uint64 // major<<32 | minor (as the kernel prints them)
	Inode      uint64
	Path       string // "" for anonymous memory; "[stack]", "[vdso]"...
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a file.
func (m Mapping) File() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// maxMaps bounds what is read: a process has at most vm.max_map_count
// (65,530 by default) mappings of ~100 bytes per line.
const maxMaps = 64 << 20

// Read returns pid's mappings in address order.
func Read(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(io.LimitReader(f, maxMaps))
}

// Parse parses the maps format. Lines it cannot read are an error.
func Parse(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		m, err := parseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// parseLine reads "start-end perms offset major:minor inode   path".
func parseLine(line string) (Mapping, error) {
	var m Mapping
	f := strings.Fields(line)
	if len(f) < 5 {
		return m, fmt.Errorf("maps: short line %q", line)
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	maj, min, ok2 := strings.Cut(f[3], ":")
	if !ok || !ok2 {
		return m, fmt.Errorf("maps: bad line %q", line)
	}
	var err error
	num := func(s string, base int) uint64 {
		v, e := strconv.ParseUint(s, base, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("maps: bad number %q in %q", s, line)
		}
		return v
	}
	m.Start, m.End, m.Perms, m.Offset = num(lo, 16), num(hi, 16), f[1], num(f[2], 16)
	m.Dev, m.Inode = num(maj, 16)<<32|num(min, 16), num(f[4], 10)
	// The path is the rest of the line after the fifth field, spaces included.
	rest := line
	for i := 0; i < 5; i++ {
		rest = strings.TrimLeft(rest, " \t")
		if j := strings.IndexAny(rest, " \t"); j >= 0 {
			rest = rest[j:]
		} else {
			rest = ""
		}
	}
	m.Path = strings.TrimLeft(rest, " \t")
	if m.End < m.Start {
		return m, fmt.Errorf("maps: bad range in %q", line)
	}
	return m, err
}

// Mem is a process's memory, read and written through /proc/PID/mem. A
// write reaches read-only pages too (as a debugger's breakpoints do).
type Mem struct{ f *os.File }

// OpenMem opens pid's memory, for writing too when write is set.
func OpenMem(pid int, write bool) (*Mem, error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), flag, 0)
	if err != nil {
		return nil, err
	}
	return &Mem{f}, nil
}

// Close closes the memory file.
func (m *Mem) Close() error { return m.f.Close() }

// ReadAt reads len(b) bytes at addr.
func (m *Mem) ReadAt(b []byte, addr uint64) error {
	if addr > 1<<63 {
		return fmt.Errorf("mem: address %#x out of range", addr)
	}
	n, err := m.f.ReadAt(b, int64(addr))
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("mem: reading %d bytes at %#x: %w", len(b), addr, err)
}

// WriteAt writes b at addr.
func (m *Mem) WriteAt(b []byte, addr uint64) error {
	if addr > 1<<63 {
		return fmt.Errorf("mem: address %#x out of range", addr)
	}
	if _, err := m.f.WriteAt(b, int64(addr)); err != nil {
		return fmt.Errorf("mem: writing %d bytes at %#x: %w", len(b), addr, err)
	}
	return nil
}

// Word reads the 64-bit word at addr.
func (m *Mem) Word(addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// SetWord writes the 64-bit word at addr (one 8-byte write).
func (m *Mem) SetWord(addr, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return m.WriteAt(b[:], addr)
}

// String reads a NUL-terminated string of at most max bytes at addr.
func (m *Mem) String(addr uint64, max int) (string, error) {
	b := make([]byte, max)
	n, err := m.f.ReadAt(b, int64(addr))
	if n == 0 && err != nil {
		return "", fmt.Errorf("mem: reading a string at %#x: %w", addr, err)
	}
	if i := bytes.IndexByte(b[:n], 0); i >= 0 {
		n = i
	}
	return string(b[:n]), nil
}
