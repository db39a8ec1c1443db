// Package sysmem says how much memory this process can still take before
// the machine or its cgroup runs out: the kernel's MemAvailable, or less
// when its cgroup's memory limit (v2, or v1's memory controller) is nearer.
package sysmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Available returns the bytes this process can still allocate, as far as
// /proc/meminfo and its cgroup (v2) know. ok is false when neither can be
// read.
func Available() (bytes uint64, ok bool) {
	return available("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup")
}

func available(meminfo, cgroup, cgroupRoot string) (uint64, bool) {
	avail, ok := memAvailable(meminfo)
	if limit, used, err := cgroupLimit(cgroup, cgroupRoot); err == nil {
		left := uint64(0)
		if limit > used {
			left = limit - used
		}
		if !ok || left < avail {
			avail, ok = left, true
		}
	}
	return avail, ok
}

// memAvailable reads MemAvailable (in kB) from a meminfo file.
func memAvailable(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil || kb > 1<<50 {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// cgroupLimit reads the limit and the use of this process's memory cgroup:
// memory.limit_in_bytes and memory.usage_in_bytes of its v1 memory
// controller ("N:memory:/path", under root/memory), else memory.max and
// memory.current of its v2 group ("0::/path"). No limit is an error.
func cgroupLimit(cgroup, root string) (limit, used uint64, err error) {
	b, err := os.ReadFile(cgroup)
	if err != nil {
		return 0, 0, err
	}
	var v1, v2 string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		switch {
		case len(f) < 3:
		case strings.Contains(","+f[1]+",", ",memory,"):
			v1 = filepath.Join(root, "memory", filepath.Clean("/"+f[2]))
		case f[0] == "0" && f[1] == "":
			v2 = filepath.Join(root, filepath.Clean("/"+f[2]))
		}
	}
	// A v1 memory controller holds the limit even beside a v2 group (the
	// hybrid layout).
	dir, maxName, curName := v1, "memory.limit_in_bytes", "memory.usage_in_bytes"
	if v1 == "" {
		dir, maxName, curName = v2, "memory.max", "memory.current"
	}
	if dir == "" {
		return 0, 0, fmt.Errorf("sysmem: no memory cgroup in %s", cgroup)
	}
	read := func(name string) (uint64, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	// v2 writes "max" for no limit; v1 a number near 2^63.
	if limit, err = read(maxName); err != nil || limit >= 1<<62 {
		return 0, 0, fmt.Errorf("sysmem: %s: no limit (%v)", dir, err)
	}
	if used, err = read(curName); err != nil {
		return 0, 0, fmt.Errorf("sysmem: %s: %w", dir, err)
	}
	return limit, used, nil
}
