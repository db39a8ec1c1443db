package sysmem

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAvailable(t *testing.T) {
	const meminfo = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n"
	for _, tc := range []struct {
		name            string
		meminfo, cgroup string
		max, current    string
		want            uint64
		ok              bool
	}{
		{"meminfo only", meminfo, "", "", "", 8000000 << 10, true},
		{"cgroup limit nearer", meminfo, "0::/job\n", "1073741824\n", "73741824\n", 1000000000, true},
		{"cgroup limit farther", meminfo, "0::/job\n", "107374182400\n", "0\n", 8000000 << 10, true},
		{"cgroup without a limit", meminfo, "0::/job\n", "max\n", "5\n", 8000000 << 10, true},
		{"cgroup over its limit", meminfo, "0::/job\n", "100\n", "200\n", 0, true},
		{"cgroup v1 without a limit", meminfo, "4:memory:/job\n", "9223372036854771712\n", "5\n", 8000000 << 10, true},
		{"cgroup v1 limit nearer", meminfo, "4:memory:/job\n0::/\n", "1073741824\n", "73741824\n", 1000000000, true},
		{"no MemAvailable, a limit", "MemTotal: 5 kB\n", "0::/\n", "4096\n", "1024\n", 3072, true},
		{"nothing readable", "", "", "", "", 0, false},
		{"garbage", "MemAvailable: lots kB\n", "0::/job\n", "-1\n", "x\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mi, cg, root := filepath.Join(dir, "meminfo"), filepath.Join(dir, "cgroup"), filepath.Join(dir, "fs")
			if tc.meminfo != "" {
				write(t, mi, tc.meminfo)
			}
			if tc.cgroup != "" {
				write(t, cg, tc.cgroup)
			}
			sub, maxName, curName := filepath.Join(root, "job"), "memory.max", "memory.current"
			switch {
			case tc.cgroup == "0::/\n":
				sub = root
			case strings.Contains(tc.cgroup, ":memory:"):
				sub, maxName, curName = filepath.Join(root, "memory", "job"), "memory.limit_in_bytes", "memory.usage_in_bytes"
			}
			if tc.max != "" {
				write(t, filepath.Join(sub, maxName), tc.max)
				write(t, filepath.Join(sub, curName), tc.current)
			}
			got, ok := available(mi, cg, root)
			if got != tc.want || ok != tc.ok {
				t.Errorf("available = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if b, ok := Available(); !ok || b == 0 {
		t.Errorf("this machine: Available() = %d, %v", b, ok)
	}
}
