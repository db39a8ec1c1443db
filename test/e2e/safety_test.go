package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inTmpfs runs argv in a private mount namespace with a tmpfs of the given
// size mounted on mountpoint: a small /dev/shm, as in a container.
func inTmpfs(t *testing.T, size, mountpoint string, env []string, argv ...string) result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a small tmpfs in a private mount namespace: run it as root (unshare -m, mount -t tmpfs)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	script := `mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"`
	args := append([]string{"-m", "sh", "-c", script, "sh", size, mountpoint}, argv...)
	return runEnv(t, 3*time.Minute, env, "unshare", args...)
}

// Rings are backed before use, as they fill: a /dev/shm too small for them
// never kills the program with SIGBUS (it did, at the first write to an
// unbacked page). When the file system fills while the program runs, the
// library stops recording and counts what it drops; when not even the start
// of a ring fits, the process runs unprofiled. The run's warnings say which.
func TestFullRingFilesystem(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "stress.c")
	bare := run(t, 2*time.Minute, bin, "20000")
	if bare.code != 0 {
		t.Fatalf("stress fails without heaplens: %d %s", bare.code, bare.stdout)
	}
	filled := regexp.MustCompile(`process \d+ \(stress\) filled /dev/shm/heaplens-\S+: its ring could be backed only to \d+ [KM]iB of 128 MiB \(no space left on device\); ` +
		`its samples after that point were dropped and counted \([1-9]\d* allocations, [1-9]\d* frees`)
	cases := []struct {
		shm  string
		want *regexp.Regexp // in heaplens's warnings
	}{
		// 8 threads at --rate 1 (whose ring is 128 MiB) record far more than 8 MiB: the ring fills
		// the file system while the program runs (the start of it fits).
		{"8m", filled},
		{"1m", filled},
		// Not even the start of a ring (a header page and 64 KiB) fits.
		{"64k", regexp.MustCompile(`process \d+ \(stress\) ran unprofiled: could not back even the start of a ring of 128 MiB in /dev/shm/heaplens-\S+: no space left on device`)},
	}
	for _, c := range cases {
		t.Run("shm="+c.shm, func(t *testing.T) {
			capPath := filepath.Join(dir, "shm"+c.shm+".hlc")
			res := inTmpfs(t, c.shm, "/dev/shm", nil, heaplensBin(t), "run", "-o", capPath, "--rate", "1", "--", bin, "20000")
			if res.code != 0 || res.stdout != bare.stdout {
				t.Fatalf("with a %s /dev/shm: exit %d, output %q, want 0 and %q\n%s", c.shm, res.code, res.stdout, bare.stdout, res.stderr)
			}
			if !c.want.MatchString(res.stderr) {
				t.Errorf("the run does not say what became of the ring; want %q in:\n%s", c.want, res.stderr)
			}
		})
	}
}

// A ring commits memory only as it fills: a shell and eight children that
// record little each get a ring of 16 MiB in a 4 MiB /dev/shm, with nothing
// dropped and nothing to warn about. (Backing whole rings up front cost
// 16 MiB and ~12 ms of system time per process image.)
func TestRingsBackedAsTheyFill(t *testing.T) {
	dir := t.TempDir()
	capPath := filepath.Join(dir, "lazy.hlc")
	script := `for i in 1 2 3 4 5 6 7 8; do sleep 0.5 & done; wait; echo done`
	res := inTmpfs(t, "4m", "/dev/shm", nil, heaplensBin(t), "run", "-o", capPath, "--", "bash", "-c", script)
	if res.code != 0 || res.stdout != "done\n" {
		t.Fatalf("exit %d, output %q, want 0 and \"done\\n\"\n%s", res.code, res.stdout, res.stderr)
	}
	if strings.Contains(res.stderr, "/dev/shm/heaplens-") {
		t.Errorf("a ring was refused or cut short in a 4 MiB /dev/shm:\n%s", res.stderr)
	}
	// The shell, and each child twice: as bash's fork and as sleep.
	if c := load(t, capPath); len(c.Processes) != 17 {
		t.Errorf("%d streams, want 17 (bash, then 8 forks and their 8 execs of sleep)\n%s", len(c.Processes), res.stderr)
	}
}

// No value of the library's variables can change what the program does:
// each run must print what the bare run prints and exit as it does. The
// rings go to a 1 MiB tmpfs, so a ring size that parses to more than that
// and is not backed would kill the program.
func TestHostileEnvironment(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "stress.c")
	lib := filepath.Join(root, "internal", "launch", "lib", "libheaplens.so")
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("%s is missing: run `make` first: %v", lib, err)
	}
	bare := run(t, 2*time.Minute, bin, "3000")
	if bare.code != 0 {
		t.Fatalf("stress fails without heaplens: %d %s", bare.code, bare.stdout)
	}
	rings := filepath.Join(dir, "rings")
	if err := os.Mkdir(rings, 0o700); err != nil {
		t.Fatal(err)
	}
	afile := filepath.Join(dir, "afile")
	os.WriteFile(afile, nil, 0o600)
	cases := []struct{ name, value string }{
		{"HEAPLENS_RING_SIZE", "18446744074783293440"}, // 2^64 + 1 GiB: wraps to 1 GiB when parsed carelessly
		{"HEAPLENS_RING_SIZE", "99999999999999999999999999"},
		{"HEAPLENS_RING_SIZE", "1099511627776"}, // 1 TiB
		{"HEAPLENS_RING_SIZE", "4096"},
		{"HEAPLENS_RING_SIZE", "100000"},
		{"HEAPLENS_RING_SIZE", "-65536"},
		{"HEAPLENS_RING_SIZE", "0x100000"},
		{"HEAPLENS_RING_SIZE", ""},
		{"HEAPLENS_RATE", "18446744073709551617"},
		{"HEAPLENS_RATE", "0"},
		{"HEAPLENS_RATE", "-1"},
		{"HEAPLENS_RATE", "1.5"},
		{"HEAPLENS_RATE", "18446744073709551615"},
		{"HEAPLENS_SEED", "18446744073709551616"},
		{"HEAPLENS_SEED", "seed"},
		{"HEAPLENS_DIR", "relative/rings"},
		{"HEAPLENS_DIR", "/" + strings.Repeat("d", 5000)},
		{"HEAPLENS_DIR", "/nonexistent/heaplens"},
		{"HEAPLENS_DIR", afile},
		{"HEAPLENS_DIR", ""},
		{"HEAPLENS_AGENT_PID", "99999999999999999999"},
		{"HEAPLENS_AGENT_PID", "-1"},
		{"HEAPLENS_FOLLOW", "2"},
		{"HEAPLENS_FOLLOW", "18446744073709551616"},
		{"HEAPLENS_FOLLOW", "no"},
		{"HEAPLENS_PYTHON", "\xff"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s=%.24q", c.name, c.value), func(t *testing.T) {
			env := []string{"LD_PRELOAD=" + lib, "HEAPLENS_DIR=" + rings, "HEAPLENS_RATE=1"}
			env = append(env, c.name+"="+c.value) // the last one wins
			res := inTmpfs(t, "1m", rings, env, bin, "3000")
			if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
				t.Errorf("%s=%q: exit %d, stdout %q, stderr %q; bare: exit %d, stdout %q, stderr %q",
					c.name, c.value, res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
			}
		})
	}
}

// A fork while other threads are inside the unwinder holding its lock
// (libgcc's object_mutex, taken for every lookup once a program registers
// frames, as JITs do): the child must not unwind, or it waits forever for a
// lock whose owner did not survive the fork. Such children are recorded
// without native frames, and the capture's notes say so; with -q nothing of
// it reaches the program's standard error, which stays as bare. The unwind
// tables' walk takes no lock and leaves libgcc only a module's first few ms:
// the check mode, which walks every stack with libgcc too, keeps the threads
// in it.
func TestForkWhileUnwinding(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "unwindfork.c")
	bare := run(t, 2*time.Minute, bin)
	capPath := filepath.Join(dir, "unwind.hlc")
	res := runEnv(t, 2*time.Minute, []string{"HEAPLENS_UNWIND_CHECK=1"}, heaplensBin(t), "run", "-q", "-o", capPath, "--rate", "1", "--", bin)
	if res.code != 0 || res.stdout != "children ok 60 of 60\n" || bare.stdout != res.stdout {
		t.Fatalf("exit %d, stdout %q (bare: %q)\n%s", res.code, res.stdout, bare.stdout, res.stderr)
	}
	if res.stderr != bare.stderr {
		t.Errorf("with -q, standard error differs from the bare run's %q:\n%s", bare.stderr, res.stderr)
	}
	c := load(t, capPath)
	var notes []string
	for _, n := range c.Notes {
		notes = append(notes, n.Text)
	}
	if !regexp.MustCompile(`process \d+ \(unwindfork\) was forked while another thread was unwinding`).MatchString(strings.Join(notes, "\n")) {
		t.Errorf("no child was noted as forked while unwinding (three threads unwind all the time); the notes:\n%s", strings.Join(notes, "\n"))
	}
	if len(c.Processes) != 61 {
		t.Errorf("%d streams, want the parent and its 60 children", len(c.Processes))
	}
}

// A capture that cannot be written to the end (a full disk) costs the
// capture, not the command: heaplens exits with the command's status, says
// what went wrong and still summarises what it has.
func TestFullCaptureDisk(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "leaky.c")
	mnt := filepath.Join(dir, "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	// --rate 4KiB makes a capture of several hundred KiB; the disk holds 64 KiB.
	res := inTmpfs(t, "64k", mnt, nil, heaplensBin(t), "run", "--rate", "4KiB", "-o", filepath.Join(mnt, "x.hlc"), "--", bin)
	if res.code != 0 || !strings.Contains(res.stdout, "keep_small 20480000") {
		t.Fatalf("exit %d (the command exited 0), stdout %q\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "no space left on device") || !strings.Contains(res.stderr, "the capture may be incomplete") {
		t.Errorf("the run does not say that the capture could not be written:\n%s", res.stderr)
	}
	if !strings.Contains(res.stderr, "leaky exited with status 0") {
		t.Errorf("no summary:\n%s", res.stderr)
	}
}

// The soft lap (docs/ring-format.md, "Protocol"): at --rate 1, whose ring is
// 128 MiB, a process whose agent keeps up cycles through the ring's first
// 16 MiB and never backs the rest, though it writes well over 128 MiB of
// records; and nothing is lost on the way (the SKIP records the library
// leaves at each lap's end are read past). Before, the whole 128 MiB was
// backed by the end of the first lap. The process paces itself so that the
// agent keeps up (~70 MB/s of records); one that fell behind for a while
// would back some more (bursts need it), hence the bound of 64 MiB, half of
// the ring, rather than 16: the agent would have to stall for ~0.7 s.
func TestRingSoftLap(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "softlap.c")
	const n, size = 3000000, 200 // ~56 bytes of ALLOC and 32 of FREE each: ~260 MB of records
	capPath := filepath.Join(dir, "softlap.hlc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, heaplensBin(t), "run", "-q", "--rate", "1", "-o", capPath, "--", bin, strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var pid int
	if _, perr := fmt.Sscanf(line, "paused %d", &pid); err != nil || perr != nil {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("softlap did not pause: %q, %v\n%s", line, err, stderr.String())
	}
	backed := ringResident(pid) // the agent unlinked the file: read the mapping's
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("heaplens run: %v\n%s", err, stderr.String())
	}
	if backed < 0 {
		t.Fatalf("found no mapping of its ring (new.%d) in /proc/%d/smaps", pid, pid)
	}
	t.Logf("ring of 128 MiB: %.1f MiB resident after ~260 MB of records", float64(backed)/(1<<20))
	if backed > 64<<20 {
		t.Errorf("%.1f MiB of the ring are resident, want at most 64: its writers did not keep to the soft lap", float64(backed)/(1<<20))
	}
	if got := report(t, capPath, "allocs").site("churn"); got != n*size {
		t.Errorf("churn allocated %.0f bytes, want exactly %d", got, n*size)
	}
	c := load(t, capPath)
	if len(c.Processes) != 1 || len(c.Ends) != 1 {
		t.Fatalf("%d streams and %d ends, want one of each", len(c.Processes), len(c.Ends))
	}
	for _, e := range c.Ends {
		if e.DroppedAllocs+e.DroppedFrees+e.LostBytes != 0 {
			t.Errorf("%d allocations and %d frees dropped, %d bytes lost, want none", e.DroppedAllocs, e.DroppedFrees, e.LostBytes)
		}
	}
}

// The soft lap makes --rate 1 fit a container's /dev/shm (Docker's is
// 64 MiB) while the agent keeps up: there, where the 128 MiB ring filled it
// and dropped the rest (TestFullRingFilesystem), nothing is dropped and
// nothing is warned about. The workload paces itself (~70 MB/s of
// records): the agent would have to stall for ~0.7 s, 48 MiB behind, for
// the ring to fill it.
func TestRingSoftLapSmallShm(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "softlap.c")
	const n, size = 1000000, 200
	capPath := filepath.Join(dir, "small.hlc")
	res := inTmpfs(t, "64m", "/dev/shm", nil, heaplensBin(t), "run", "-o", capPath, "--rate", "1", "--", bin, strconv.Itoa(n))
	if res.code != 0 || !strings.HasPrefix(res.stdout, "paused ") {
		t.Fatalf("exit %d, output %q, want 0 and \"paused PID\"\n%s", res.code, res.stdout, res.stderr)
	}
	if strings.Contains(res.stderr, "/dev/shm/heaplens-") {
		t.Errorf("the ring filled a 64 MiB /dev/shm:\n%s", res.stderr)
	}
	if got := report(t, capPath, "allocs").site("churn"); got != n*size {
		t.Errorf("churn allocated %.0f bytes, want exactly %d", got, n*size)
	}
}

// ringResident is the resident bytes of pid's mapping of its ring: the pages
// the library backed (it populates them as it backs them); -1 if none.
func ringResident(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return -1
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.Contains(f[0], "-") {
			in = strings.Contains(line, fmt.Sprintf("/new.%d ", pid)) // mapped before it was linked as ring.PID.0
			continue
		}
		var kb int64
		if _, err := fmt.Sscanf(line, "Rss: %d kB", &kb); err == nil && in {
			return kb << 10
		}
	}
	return -1
}
