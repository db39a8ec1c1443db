package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// attachLeak is what the attach workloads leak: 512 KiB every 10th tick of
// 10 ms (test/workloads/attachserver.c, pyserver.py).
const attachLeak = 512 << 10

// target is a program started outside heaplens, for heaplens attach.
type target struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
	log      string // the workload's side log: when it leaked what
	done     chan struct{}
	res      result
}

func startTarget(t *testing.T, log string, name string, args ...string) *target {
	t.Helper()
	tg := &target{cmd: exec.Command(name, args...), log: log, done: make(chan struct{})}
	tg.cmd.Stdout, tg.cmd.Stderr = &tg.out, &tg.err
	if err := tg.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := tg.cmd.Wait()
		tg.res = result{tg.out.String(), tg.err.String(), 0}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			tg.res.code = ee.ExitCode()
			if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
				tg.res.code = 128 + int(ws.Signal())
			}
		}
		close(tg.done)
	}()
	return tg
}

func (tg *target) pid() int { return tg.cmd.Process.Pid }

// twins starts a program twice, one to run undisturbed and one to attach
// to; with logged, each gets its own side log as its last argument.
func twins(t *testing.T, dir string, logged bool, name string, args ...string) (bare, tg *target) {
	t.Helper()
	if !logged {
		return startTarget(t, "", name, args...), startTarget(t, "", name, args...)
	}
	return twinsWhere(t, where{host: dir, inside: dir}, name, args...)
}

// twinsWhere starts the logged twins where w says (each log in w's
// scratch directory): inside a root, each in a mount namespace of its own.
func twinsWhere(t *testing.T, w where, name string, args ...string) (bare, tg *target) {
	t.Helper()
	start := func(log string) *target {
		host, inside := w.file(log)
		argv := w.command(append(append([]string{name}, args...), inside)...)
		return startTarget(t, host, argv[0], argv[1:]...)
	}
	bare, tg = start("bare.log"), start("attached.log")
	tg.waitLog(t)
	return bare, tg
}

// sameAsBare waits for both and checks that the attached one printed and
// exited exactly as the undisturbed one, successfully.
func sameAsBare(t *testing.T, bare, tg *target) {
	t.Helper()
	want, got := bare.wait(t, 2*time.Minute), tg.wait(t, 2*time.Minute)
	if got != want || got.code != 0 {
		t.Errorf("attached run differs from the bare run:\nbare:     %+v\nattached: %+v", want, got)
	}
}

func (tg *target) running() bool {
	select {
	case <-tg.done:
		return false
	default:
		return true
	}
}

func (tg *target) wait(t *testing.T, timeout time.Duration) result {
	t.Helper()
	select {
	case <-tg.done:
		return tg.res
	case <-time.After(timeout):
		tg.cmd.Process.Kill()
		<-tg.done
		t.Fatalf("%v: still running after %v (deadlock?)", tg.cmd.Args, timeout)
	}
	return result{}
}

// waitLog waits until the workload has logged its first leak: it runs.
func (tg *target) waitLog(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(tg.log); len(b) > 0 {
			return
		}
		if !tg.running() {
			t.Fatalf("%v ended before it started: %+v", tg.cmd.Args, tg.res)
		}
	}
	t.Fatalf("%v: no leak logged in 30 s", tg.cmd.Args)
}

// leakedBetween reads a workload's side log: the bytes it leaked between
// two CLOCK_MONOTONIC times, and in how many blocks.
func leakedBetween(t *testing.T, log string, from, until int64) (float64, int) {
	t.Helper()
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ts, _, ok := strings.Cut(sc.Text(), " ")
		v, err := strconv.ParseInt(ts, 10, 64)
		if ok && err == nil && v >= from && v <= until {
			n++
		}
	}
	return float64(n) * attachLeak, n
}

// attachWindow is the session's window from its capture: the attached
// process's stream, from its start to its end record.
func attachWindow(t *testing.T, capPath string, pid int) (from, until int64) {
	from, until, _ = attachStream(t, capPath, pid)
	return from, until
}

// attachStream is attachWindow with the allocation records the stream's ring dropped.
func attachStream(t *testing.T, capPath string, pid int) (from, until int64, dropped uint64) {
	t.Helper()
	c, err := capture.Load(capPath)
	if err != nil {
		t.Fatal(err)
	}
	if c.Meta.AttachedPID != pid {
		t.Fatalf("%s: AttachedPID %d, want %d", capPath, c.Meta.AttachedPID, pid)
	}
	for _, p := range c.Processes {
		if p.PID == pid {
			e := c.Ends[p.Stream]
			if e == nil || !e.Detached {
				t.Fatalf("%s: the stream of pid %d does not end detached: %+v", capPath, pid, e)
			}
			return p.StartMonoNano, e.TimeNano, e.DroppedAllocs
		}
	}
	t.Fatalf("%s: no stream of pid %d", capPath, pid)
	return
}

// checkLeakFound checks that the session's leaks view finds leak_slowly
// with what the workload logged meanwhile: exactly at --rate 1 (give or
// take the block at each edge of the window), within 4 standard
// deviations of the sampling at another rate. The deviation of a
// Horvitz-Thompson estimate of n blocks of s bytes, each sampled with
// p = 1-(1-1/rate)^s, is s*sqrt(n*(1-p)/p).
func checkLeakFound(t *testing.T, capPath string, pid int, log string, rate float64) {
	t.Helper()
	from, until, dropped := attachStream(t, capPath, pid)
	want, n := leakedBetween(t, log, from, until)
	leaks := report(t, capPath, "leaks")
	got := leaks.site("leak_slowly")
	if n < 2 {
		t.Fatalf("%s: only %d leaks in the %.2f s window: the workload did not run", capPath, n, float64(until-from)/1e9)
	}
	if got <= 0 {
		t.Errorf("%s: leak_slowly not found (%d blocks of %d leaked in the window)", capPath, n, attachLeak)
		return
	}
	// A block at an edge of the window, and the list that keeps the blocks:
	// leak_slowly's append grows its item array (a few KiB at most), which
	// stays live at that site and is counted whole at --rate 1.
	slack := float64(attachLeak) + 64<<10
	// A full ring drops records, and says so: any of them may have been a leaked block.
	if dropped > 0 {
		t.Logf("LOUD: %s: the ring dropped %d allocation records (the agent fell behind)", capPath, dropped)
		slack += float64(dropped) * attachLeak
	}
	if rate > 1 {
		p := 1 - math.Pow(1-1/rate, attachLeak)
		slack += 4 * attachLeak * math.Sqrt(float64(n)*(1-p)/p)
	}
	t.Logf("%s: leak_slowly %.0f of %.0f bytes leaked in %.2f s (tolerance %.0f)", filepath.Base(capPath), got, want, float64(until-from)/1e9, slack)
	if math.Abs(got-want) > slack {
		t.Errorf("%s: leak_slowly %.0f bytes, the workload leaked %.0f in the window (tolerance %.0f)", capPath, got, want, slack)
	}
	if other := leaks.total() - got; rate == 1 && other > 1<<20 {
		t.Errorf("%s: %.0f bytes leaked outside leak_slowly at --rate 1 (only blocks in flight at the detach may be)", capPath, other)
	}
}

// attachSessions attaches to the target n times in a row, each for d, and
// checks each session's capture.
func attachSessions(t *testing.T, dir string, tg *target, n int, d time.Duration, rate string) {
	t.Helper()
	attachSessionsWhere(t, where{bin: heaplensBin(t), host: dir, inside: dir}, tg, n, d, rate)
}

// attachSessionsWhere is attachSessions with heaplens where w says.
func attachSessionsWhere(t *testing.T, w where, tg *target, n int, d time.Duration, rate string) {
	t.Helper()
	r, _ := strconv.ParseFloat(strings.TrimSuffix(rate, "KiB"), 64)
	if strings.HasSuffix(rate, "KiB") {
		r *= 1024
	}
	for i := 0; i < n; i++ {
		if !tg.running() {
			t.Fatalf("the target ended after %d sessions at rate %s; make it run longer", i, rate)
		}
		capPath, capArg := w.file(fmt.Sprintf("attach-%s-%d.hlc", rate, i))
		argv := append(w.attacher(tg.pid()), "attach", strconv.Itoa(tg.pid()), "--rate", rate,
			"--seed", strconv.Itoa(i+1), "--duration", d.String(), "-o", capArg, "-q")
		res := run(t, time.Minute, argv[0], argv[1:]...)
		if res.code != 0 {
			t.Fatalf("attach %d at rate %s: exit %d\n%s", i, rate, res.code, res.stderr)
		}
		checkLeakFound(t, capPath, tg.pid(), tg.log, r)
	}
}

// TestAttachCServer: a threaded C server, attached to 20 times in a row
// at the default rate and 20 at --rate 1, prints and exits exactly as an
// undisturbed run beside it, and each session finds its leak.
func TestAttachCServer(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "attachserver.c")
	const seconds = "45"
	bare, tg := twins(t, dir, true, bin, seconds)
	attachSessions(t, dir, tg, 20, time.Second, "512KiB")
	attachSessions(t, dir, tg, 20, 500*time.Millisecond, "1")
	sameAsBare(t, bare, tg)
	t.Logf("worst lateness of the main loop's 10 ms sleeps: bare %s, attached %s", lastLine(t, bare.log), lastLine(t, tg.log))
}

func lastLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// TestAttachPythonServer: the same with a threaded Python service, on
// every supported Python: 20 + 20 sessions on Debian's python3, 2 + 2 on
// each of the others (all at once, beside their undisturbed runs); on 3.14
// and 3.15 heaplens attach runs inside the sid root, in the target's mount
// namespace.
func TestAttachPythonServer(t *testing.T) {
	for _, py := range everyPython(t) {
		sessions, seconds := 2, "12"
		if py.name == "debian-python3" {
			// 40 sessions take ~42 s on a quiet machine; on a loaded one
			// a session's start stretched to 6.75 s once, past a 45 s run.
			sessions, seconds = 20, "75"
		}
		t.Run(py.name, func(t *testing.T) {
			t.Parallel()
			w := py.where(t)
			bare, tg := twinsWhere(t, w, py.path, w.workload(t, "pyserver.py"), seconds)
			attachSessionsWhere(t, w, tg, sessions, time.Second, "512KiB")
			attachSessionsWhere(t, w, tg, sessions, 500*time.Millisecond, "1")
			sameAsBare(t, bare, tg)
		})
	}
}

// attachFor runs one session of d at rate and returns its capture.
func attachFor(t *testing.T, dir string, pid int, d time.Duration, rate string) string {
	t.Helper()
	capPath := filepath.Join(dir, fmt.Sprintf("attach-%d-%s.hlc", pid, rate))
	res := run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(pid), "--rate", rate, "--duration", d.String(), "-o", capPath, "-q")
	if res.code != 0 {
		t.Fatalf("attach: exit %d\n%s", res.code, res.stderr)
	}
	return capPath
}

// stormSession runs attachstorm with args twice, attaches to one for 2 s
// at rate a second after its start, and checks that it ran as the other.
func stormSession(t *testing.T, rate string, args ...string) (capPath string, pid int) {
	t.Helper()
	dir := t.TempDir()
	bin := build(t, dir, "attachstorm.c", "-fopenmp")
	bare, tg := twins(t, dir, false, bin, args...)
	time.Sleep(time.Second)
	capPath = attachFor(t, dir, tg.pid(), 2*time.Second, rate)
	sameAsBare(t, bare, tg)
	return capPath, tg.pid()
}

// TestAttachForkStorm: attached in the middle of a fork storm, the program
// runs as it would; the children forked meanwhile are profiled too.
func TestAttachForkStorm(t *testing.T) {
	capPath, pid := stormSession(t, "1", "fork", "1500")
	checkStormChildren(t, capPath, pid)
}

// checkStormChildren checks a --rate 1 capture of attachstorm fork: each
// child pid forked and ended while attached recorded its 10 blocks.
func checkStormChildren(t *testing.T, capPath string, pid int) {
	t.Helper()
	c, err := capture.Load(capPath)
	if err != nil {
		t.Fatal(err)
	}
	// At --rate 1 every child that exited meanwhile recorded child_keep's 10 blocks
	// of 1000 bytes (by size: a child forked while a thread unwound has no native frames).
	kept := map[uint32]int{}
	last := map[uint32]int64{} // the parent's threads sample until the session ends
	for _, a := range c.Allocs {
		if a.Size == 1000 {
			kept[a.Stream]++
		}
		last[a.Stream] = max(last[a.Stream], a.TimeNano)
	}
	var stopped int64
	for _, p := range c.Processes {
		if p.PID == pid {
			stopped = last[p.Stream]
		}
	}
	children := 0
	for _, p := range c.Processes {
		if p.PPID != pid {
			continue
		}
		children++
		// One forked as the session ended stops with it (it inherits the stop).
		if e := c.Ends[p.Stream]; e != nil && e.Known && p.StartMonoNano < stopped-int64(10*time.Millisecond) && kept[p.Stream] < 10 {
			t.Errorf("child %d: %d blocks of 1000 bytes recorded, want 10", p.PID, kept[p.Stream])
		}
	}
	// A child every ~2 ms for 2 s: hundreds.
	if children < 50 {
		t.Errorf("%d children profiled during a 2 s fork storm", children)
	}
}

// TestAttachOpenMP: attached in the middle of OpenMP regions, the teams
// keep their size and compute the same; the workers' allocations are seen,
// charged to the code that opened the region.
func TestAttachOpenMP(t *testing.T) {
	capPath, _ := stormSession(t, "64KiB", "omp", "200")
	checkRegionsAttached(t, capPath)
}

// checkRegionsAttached checks a capture of attachstorm omp: the regions'
// allocations are seen, the workers' charged to the region's opener.
func checkRegionsAttached(t *testing.T, capPath string) {
	t.Helper()
	allocs := report(t, capPath, "allocs")
	if s := allocs.stacksWith("region._omp_fn"); len(s) == 0 {
		t.Error("no allocation of the OpenMP regions was seen while attached")
	}
	// The team's other thread works for the region's opener: its allocations
	// carry the opener's stack (main, region) above the pool frame.
	pooled := 0
	for _, s := range allocs.stacksWith("[pool: libgomp (openmp)]") {
		if strings.Contains(s, "main (") && strings.Contains(s, "region (") {
			pooled++
		}
	}
	if pooled == 0 {
		t.Errorf("no worker allocation charged to the region's opener; stacks with the region:\n%s",
			strings.Join(allocs.stacksWith("region._omp_fn"), "\n"))
	}
}

// TestAttachRefusals: what cannot be attached to is refused with a message
// saying why, and the process runs on untouched.
func TestAttachRefusals(t *testing.T) {
	dir := t.TempDir()
	hl := heaplensBin(t)
	static := filepath.Join(dir, "static")
	src := filepath.Join(dir, "static.c")
	os.WriteFile(src, []byte("#include <stdio.h>\n#include <unistd.h>\nint main(void){sleep(3);puts(\"done\");return 0;}\n"), 0o644)
	if out, err := exec.Command("gcc", "-static", "-o", static, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc -static: %v\n%s", err, out)
	}
	st := startTarget(t, "", static)
	sleeper := startTarget(t, "", "sleep", "3")
	zombie := exec.Command("true")
	zombie.Start()
	time.Sleep(200 * time.Millisecond) // it has exited; not waited for, it is a zombie
	defer zombie.Wait()
	stopped := startTarget(t, "", "sleep", "3")
	stopped.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(100 * time.Millisecond)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"attach"}, 2, "give one process id"},
		{[]string{"attach", "nope"}, 2, "not a process id"},
		{[]string{"attach", "999999999"}, 1, "no process 999999999"},
		{[]string{"attach", strconv.Itoa(st.pid())}, 1, "statically linked"},
		{[]string{"attach", strconv.Itoa(zombie.Process.Pid)}, 1, "has exited"},
		{[]string{"attach", strconv.Itoa(stopped.pid())}, 1, "is stopped"},
		{[]string{"attach", strconv.Itoa(sleeper.pid()), "--ring-size", "3KiB"}, 1, "--ring-size"},
		{[]string{"detach", strconv.Itoa(sleeper.pid())}, 1, "not attached"},
	}
	for _, c := range cases {
		res := run(t, 30*time.Second, hl, c.args...)
		if res.code != c.code || !strings.Contains(res.stderr, c.want) {
			t.Errorf("heaplens %v: exit %d, stderr %q; want exit %d and %q", c.args, res.code, res.stderr, c.code, c.want)
		}
	}
	stopped.cmd.Process.Signal(syscall.SIGCONT)
	for _, tg := range []*target{st, sleeper, stopped} {
		if res := tg.wait(t, 30*time.Second); res.code != 0 {
			t.Errorf("%v after the refusals: %+v", tg.cmd.Args, res)
		}
	}
	if res := st.res; res.stdout != "done\n" {
		t.Errorf("the static program printed %q", res.stdout)
	}
}

// TestAttachTwiceKillDetach: a second attach is refused while the first
// runs; killing the first heaplens (SIGKILL) leaves the program running
// as it would, and its session is closed by the library itself; a new
// attach then works, and heaplens detach ends it.
func TestAttachTwiceKillDetach(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "attachserver.c")
	hl := heaplensBin(t)
	bare, tg := twins(t, dir, true, bin, "12")
	pid := strconv.Itoa(tg.pid())
	before, _ := filepath.Glob("/dev/shm/heaplens-*")

	first := exec.Command(hl, "attach", pid, "-o", filepath.Join(dir, "first.hlc"), "-q")
	var firstErr syncBuffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first attach to load the library", func() bool { return strings.Contains(firstErr.String(), "attached to pid") })
	// The first session's directory: the one that appeared meanwhile (other
	// heaplens sessions on the machine may come and go beside it).
	var session []string
	during, _ := filepath.Glob("/dev/shm/heaplens-*")
	for _, d := range during {
		if !slices.Contains(before, d) {
			session = append(session, d)
		}
	}
	if len(session) == 0 {
		t.Fatalf("no session directory appeared in /dev/shm (before %v, during %v)", before, during)
	}
	res := run(t, 30*time.Second, hl, "attach", pid, "-o", filepath.Join(dir, "second.hlc"))
	if res.code != 1 || !strings.Contains(res.stderr, fmt.Sprintf("already attached to by heaplens (pid %d)", first.Process.Pid)) {
		t.Errorf("second attach: exit %d, %q; want it refused naming pid %d", res.code, res.stderr, first.Process.Pid)
	}
	first.Process.Kill()
	first.Wait()
	// The library sees its agent gone within a second (at an allocation) and deletes its ring.
	waitFor(t, "the killed session's ring directory to go", func() bool {
		for _, d := range session {
			if _, err := os.Stat(d); err == nil {
				return false
			}
		}
		return true
	})

	third := exec.Command(hl, "attach", pid, "-o", filepath.Join(dir, "third.hlc"), "-q")
	var thirdErr syncBuffer
	third.Stderr = &thirdErr
	if err := third.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	res = run(t, 30*time.Second, hl, "detach", pid)
	if res.code != 0 || !strings.Contains(res.stdout, fmt.Sprintf("asked heaplens (pid %d)", third.Process.Pid)) {
		t.Errorf("detach: exit %d, %q %q", res.code, res.stdout, res.stderr)
	}
	if err := third.Wait(); err != nil {
		t.Fatalf("the third attach after heaplens detach: %v\n%s", err, thirdErr.String())
	}
	checkLeakFound(t, filepath.Join(dir, "third.hlc"), tg.pid(), tg.log, 512<<10)
	sameAsBare(t, bare, tg)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// syncBuffer is a bytes.Buffer that a test may read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAttachSanitized: the attach library built with UndefinedBehaviorSanitizer
// (aborting at the first finding), attached to the threaded C server 5 times
// at each rate: it runs as undisturbed, and each session finds its leak.
func TestAttachSanitized(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libheaplens-attach-ubsan.so")
	args := []string{"-O2", "-g", "-fsanitize=undefined", "-fno-sanitize-recover=all", "-std=c11", "-fPIC", "-shared",
		"-fvisibility=hidden", "-DHEAPLENS_ATTACH", "-mtls-dialect=gnu2", "-Wl,-Bsymbolic-functions",
		"-Wall", "-Wextra", "-Werror", "-Wl,-z,now", "-o", lib}
	for _, s := range append(harnessSources, "preload/openmp.c") {
		args = append(args, filepath.Join(root, s))
	}
	if b, err := exec.Command("gcc", append(args, "-lm", "-lgcc_s")...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	bin := build(t, dir, "attachserver.c")
	bare, tg := twins(t, dir, true, bin, "15")
	for i, rate := range []string{"512KiB", "1", "512KiB", "1", "512KiB", "1", "512KiB", "1", "512KiB", "1"} {
		capPath := filepath.Join(dir, fmt.Sprintf("ubsan-%d.hlc", i))
		res := run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(tg.pid()), "--library", lib, "--rate", rate,
			"--duration", "1s", "-o", capPath, "-q")
		if res.code != 0 {
			t.Fatalf("attach %d: exit %d\n%s", i, res.code, res.stderr)
		}
		r, _ := strconv.ParseFloat(strings.TrimSuffix(rate, "KiB"), 64)
		if rate != "1" {
			r *= 1024
		}
		checkLeakFound(t, capPath, tg.pid(), tg.log, r)
	}
	sameAsBare(t, bare, tg)
}

// TestAttachLive: heaplens attach --live serves the web UI while attached,
// and its leaks view names the leak.
func TestAttachLive(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "attachserver.c")
	tg := startTarget(t, filepath.Join(dir, "log"), bin, "10", filepath.Join(dir, "log"))
	tg.waitLog(t)
	cmd := exec.Command(heaplensBin(t), "attach", strconv.Itoa(tg.pid()), "--live", "--duration", "4s", "-q", "-o", filepath.Join(dir, "live.hlc"))
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urlRe := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	waitFor(t, "the live web UI's address", func() bool { return urlRe.MatchString(stderr.String()) })
	time.Sleep(2 * time.Second)
	resp, err := http.Get(urlRe.FindString(stderr.String()) + "api/profile?view=leaks")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "leak_slowly") {
		t.Errorf("live leaks view while attached: %s\n%.400s", resp.Status, body)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("heaplens attach --live: %v\n%s", err, stderr.String())
	}
	if res := tg.wait(t, time.Minute); res.code != 0 {
		t.Errorf("target: %+v", res)
	}
}
