package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResultLine(t *testing.T) {
	out := "checksum=12 loop_s=1.5 maxrss_kb=4000\n[memray] Successfully generated profile results.\n\n"
	line := ResultLine(out, "checksum")
	kv := ParseKV(line)
	if kv["loop_s"] != 1.5 || kv["maxrss_kb"] != 4000 {
		t.Errorf("ParseKV(%q) = %v", line, kv)
	}
	if got := RawValue("checksum=1.573857e+07 loop_s=2", "checksum"); got != "1.573857e+07" {
		t.Errorf("RawValue = %q", got)
	}
	if ResultLine("nothing here\n", "checksum") != "" {
		t.Error("ResultLine found a missing key")
	}
	// A key that only prefixes another word does not match.
	if ResultLine("checksums=3\n", "checksum") != "" {
		t.Error("ResultLine matched a longer key")
	}
}

func TestHelpers(t *testing.T) {
	if got := LastLines("a\n\n b \nc\n", 2); got != "b / c" {
		t.Errorf("LastLines = %q", got)
	}
	for n, want := range map[float64]string{512: "512 B", 2048: "2.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := ByteLabel(n); got != want {
			t.Errorf("ByteLabel(%v) = %q, want %q", n, got, want)
		}
	}
	t.Setenv("LD_PRELOAD", "/x.so")
	t.Setenv("PYTHONMALLOC", "malloc")
	t.Setenv("HEAPLENS_RATE", "1")
	env := strings.Join(CleanEnv("EXTRA=1"), "\n")
	if !strings.Contains(env, "PYTHONHASHSEED=0") || !strings.Contains(env, "EXTRA=1") ||
		strings.Contains(env, "LD_PRELOAD=") || strings.Contains(env, "PYTHONMALLOC") || strings.Contains(env, "HEAPLENS_") {
		t.Errorf("CleanEnv kept what changes the measurement or lost what it adds:\n%s", env)
	}
	e := SetEnv([]string{"A=1", "B=2", "AB=3"}, "A", "9")
	if strings.Join(e, " ") != "B=2 AB=3 A=9" {
		t.Errorf("SetEnv = %v", e)
	}
	if n := VmHWM("x\nVmHWM:\t    8560 kB\nmaxrss_kb=3\n"); n != 8560 {
		t.Errorf("VmHWM = %d", n)
	}
	if VmHWM("VmHWM: lots") != 0 || VmHWM("") != 0 {
		t.Error("VmHWM parsed nonsense")
	}
	stat := "4242 (sqlite3 db) S 4241 4242 4241 0 -1 4194304 1207 0 0 0 150 23 0 0 20 0 1 0 1000 9000000 2000\n"
	if cpu, ok := ProcStatCPU("maxrss_kb=3\n" + stat); !ok || cpu != 1.73 {
		t.Errorf("ProcStatCPU = %v, %v; want 1.73", cpu, ok)
	}
	if _, ok := ProcStatCPU("checksum=3 (x) y\n"); ok {
		t.Error("ProcStatCPU parsed a line that is not /proc/PID/stat")
	}
	if FileSize(filepath.Join(t.TempDir(), "missing")) != 0 {
		t.Error("FileSize of a missing file is not 0")
	}
}

// TestRun runs real commands: the measurement plumbing, not their speed.
func TestRun(t *testing.T) {
	if _, err := os.Stat(TimeBin); err != nil {
		t.Skipf("SKIPPING: %s missing (Debian package time)", TimeBin)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.WriteFile(in, []byte("x=5\n"), 0o644)
	r, err := Run(Command{Argv: []string{"sh", "-c", "cat; echo done=1 >&2"}, Stdin: in, Scratch: dir})
	if err != nil {
		t.Fatal(err)
	}
	if ParseKV(r.Stdout)["x"] != 5 || !strings.Contains(r.Stderr, "done=1") || r.TreeRSSKB <= 0 || r.WallS <= 0 {
		t.Errorf("Run = %+v", r)
	}
	if _, err := Run(Command{Argv: []string{"sh", "-c", "echo boom >&2; exit 3"}, Scratch: dir}); err == nil ||
		!strings.Contains(err.Error(), "boom") {
		t.Errorf("a failing command: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("Run left files behind: %v", ents)
	}
}
