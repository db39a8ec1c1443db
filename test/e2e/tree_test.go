package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// streamSite sums a stream's leaked bytes at file:line, or (line 0) in
// function fn.
func streamSite(c *capture.Capture, p *heap.Profile, stream uint32, file string, line int, fn string) float64 {
	var sum float64
	for _, s := range p.Samples {
		if s.Stream != stream {
			continue
		}
		for _, fr := range export.StackFrames(c, s.StackID) {
			if (line > 0 && strings.HasSuffix(fr, fmt.Sprintf("%s:%d)", file, line))) || (line == 0 && strings.HasPrefix(fr, fn+" (")) {
				sum += s.Bytes
				break
			}
		}
	}
	return sum
}

func load(t *testing.T, path string) *capture.Capture {
	t.Helper()
	c, err := capture.Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	stack.Stitch(c) // as every report does
	return c
}

// Every process of a Python tree is its own stream with its command line
// and its own retained bytes: fork, spawn and forkserver pool workers, a
// subprocess.run child, and a child started through `sh -c`.
func TestPythonProcessTree(t *testing.T) {
	sites := siteLines(t, filepath.Join(root, "test", "workloads", "pytree.py"))
	const rate = 16 << 10
	for _, py := range everyPython(t) {
		t.Run(py.name, func(t *testing.T) {
			w := py.where(t)
			script := w.workload(t, "pytree.py")
			capPath, capArg := w.file("tree.hlc")
			res := w.heaplens(t, 5*time.Minute, nil, "run", "-o", capArg, "--rate", "16KiB", "--", py.path, script)
			if res.code != 0 || !strings.Contains(res.stdout, "pytree done") {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
			}
			c := load(t, capPath)
			leaks := heap.Leaks(c, heap.Options{})
			var main *capture.Process
			for _, p := range c.Processes {
				if len(p.Cmdline) > 1 && p.Cmdline[1] == script && main == nil {
					main = p
				}
			}
			if main == nil {
				t.Fatalf("the main process is not among %d streams", len(c.Processes))
			}
			workers := map[string]int{}
			children := 0
			shSeen := false
			for _, p := range c.Processes {
				cmd := strings.Join(p.Cmdline, " ")
				if e := c.Ends[p.Stream]; e != nil && e.Exec {
					continue // the image a child had before it exec'd
				}
				kept := streamSite(c, leaks, p.Stream, script, sites["keep_init"], "")
				switch {
				case strings.HasPrefix(cmd, "sh -c"):
					shSeen = true
				case kept > 0:
					kind := "fork"
					switch {
					case strings.Contains(cmd, "spawn_main"):
						kind = "spawn"
					case p.PPID != main.PID:
						kind = "forkserver"
					}
					workers[kind]++
					// A fork child knows its interpreter from its parent.
					if p.Python == "" || p.Python != main.Python {
						t.Errorf("%s worker %d: Python %q, the parent's is %q", kind, p.PID, p.Python, main.Python)
					}
					checkSite(t, fmt.Sprintf("%s worker %d keep_init", kind, p.PID), kept, map[uint64]int{33 + 1000: 4000}, rate, 0, nil)
				case strings.Contains(cmd, "# SITE:child"):
					children++
					child := streamSite(c, leaks, p.Stream, "", 0, "child_keep")
					checkSite(t, fmt.Sprintf("child %d", p.PID), child, map[uint64]int{33 + 2000: 3000}, rate, 0, nil)
				}
			}
			for _, kind := range []string{"fork", "spawn", "forkserver"} {
				if workers[kind] != 2 {
					t.Errorf("%s pool: %d workers with their retained bytes, want 2 (processes: %d)", kind, workers[kind], len(c.Processes))
				}
			}
			if children != 2 || !shSeen {
				t.Errorf("subprocess children with their bytes: %d (want 2); sh -c wrapper seen: %v", children, shSeen)
			}
		})
	}
}

func TestKilledBySIGKILL(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "killme.c")
	const held = 100 * 65536
	for _, mode := range []string{"self", "child"} {
		t.Run(mode, func(t *testing.T) {
			capPath := filepath.Join(dir, mode+".hlc")
			res := run(t, time.Minute, heaplensBin(t), "run", "-q", "-o", capPath, "--rate", "1", "--", bin, mode)
			wantCode := 128 + 9
			if mode == "child" {
				wantCode = 0
			}
			if res.code != wantCode {
				t.Fatalf("exit %d, want %d: %s", res.code, wantCode, res.stderr)
			}
			c := load(t, capPath)
			leaks := heap.Leaks(c, heap.Options{})
			var victim *capture.Process
			for _, p := range c.Processes {
				if streamSite(c, leaks, p.Stream, "", 0, "hold") > 0 {
					victim = p
				}
			}
			if victim == nil {
				t.Fatalf("no process holds the blocks of hold()")
			}
			if got := streamSite(c, leaks, victim.Stream, "", 0, "hold"); got != held {
				t.Errorf("killed process holds %.0f bytes in hold(), want exactly %d", got, held)
			}
			e := c.Ends[victim.Stream]
			switch {
			case e == nil:
				t.Errorf("no End record for the killed process")
			case mode == "self" && !(e.Known && e.Signaled && e.Signal == 9):
				t.Errorf("the agent's own child died by SIGKILL but End says %+v", *e)
			case mode == "child" && e.Known:
				t.Errorf("a grandchild killed by SIGKILL cannot have a known exit status, End says %+v", *e)
			}
		})
	}
}

// Hundreds of short-lived children from a multithreaded parent, every call
// sampled: nothing hangs and every child is its own stream with its exit.
func TestForkStorm(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "forkstorm.c")
	capPath := filepath.Join(dir, "storm.hlc")
	res := run(t, 3*time.Minute, heaplensBin(t), "run", "-q", "-o", capPath, "--rate", "1", "--", bin)
	if res.code != 0 || res.stdout != "children ok 300 of 300\n" {
		t.Fatalf("exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	c := load(t, capPath)
	leaks := heap.Leaks(c, heap.Options{})
	kids := 0
	for _, p := range c.Processes {
		if got := streamSite(c, leaks, p.Stream, "", 0, "child_keep"); got > 0 {
			kids++
			if got != 10*1000 {
				t.Errorf("child %d keeps %.0f bytes, want 10000", p.PID, got)
			}
			if e := c.Ends[p.Stream]; e == nil || !e.Known || e.ExitCode != 0 {
				t.Errorf("child %d: End %+v, want a known exit 0 (from its exit() mark)", p.PID, e)
			}
		}
	}
	if kids != 300 {
		t.Errorf("%d children in the capture, want 300 (of %d streams)", kids, len(c.Processes))
	}
}

// Killing heaplens leaves the target unharmed: same output, same exit
// status, and the capture written so far stays readable.
func TestAgentKilled(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "stress.c")
	bare := run(t, 2*time.Minute, bin, "400000")
	if bare.code != 0 {
		t.Fatalf("stress fails bare: %d", bare.code)
	}
	// Become a subreaper so that the orphaned target is ours to wait for.
	if err := setSubreaper(); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	capPath := filepath.Join(dir, "killed.hlc")
	cmd := exec.Command(heaplensBin(t), "run", "-q", "-o", capPath, "--rate", "4KiB", "--", bin, "400000")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(bufio.NewReader(stdout))
		out <- string(b)
	}()
	time.Sleep(1500 * time.Millisecond) // past the first capture flushes
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	var got string
	select {
	case got = <-out:
	case <-time.After(2 * time.Minute):
		t.Fatal("the target did not finish after heaplens was killed")
	}
	// The orphaned target was reparented to us: reap it and read its status.
	status := -1
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && status < 0 {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err != nil {
			break
		}
		if pid > 0 && ws.Exited() {
			status = ws.ExitStatus()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got != bare.stdout || status != bare.code {
		t.Errorf("target after heaplens was killed: output %q status %d, want %q status %d", got, status, bare.stdout, bare.code)
	}
	r := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "allocs", "--format", "text")
	if strings.Contains(r.stderr, "panic") || !strings.Contains(r.stdout, "total:") {
		t.Errorf("the capture of a killed agent is not readable: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r.code != 0 && !strings.Contains(r.stderr, "truncated") && !strings.Contains(r.stderr, "corrupt") {
		t.Errorf("report failed without naming the damage: %s", r.stderr)
	}
	if _, err := os.Stat(capPath); err != nil {
		t.Errorf("no capture left: %v", err)
	}
}

func TestNoFollowAndClearedEnvironment(t *testing.T) {
	dir := t.TempDir()
	storm := build(t, dir, "forkstorm.c")
	capPath := filepath.Join(dir, "nofollow.hlc")
	res := run(t, 2*time.Minute, heaplensBin(t), "run", "-q", "--no-follow", "-o", capPath, "--rate", "64KiB", "--", storm)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if c := load(t, capPath); len(c.Processes) != 1 {
		t.Errorf("--no-follow: %d processes in the capture, want only the command's own", len(c.Processes))
	}

	// env -i starts its program with no environment, so without LD_PRELOAD:
	// that program is not followed, while the one started normally is.
	exitWith := build(t, dir, "exit_with.c")
	capPath = filepath.Join(dir, "env.hlc")
	res = run(t, time.Minute, heaplensBin(t), "run", "-o", capPath, "--", "sh", "-c",
		`env -i "$0" 1; "$0" 2`, exitWith)
	if res.code != 0 && res.code != 2 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	var seen []string
	for _, p := range load(t, capPath).Processes {
		if len(p.Cmdline) > 0 && filepath.Base(p.Cmdline[0]) == "exit_with" {
			seen = append(seen, strings.Join(p.Cmdline, " "))
		}
	}
	if len(seen) != 1 || !strings.HasSuffix(seen[0], " 2") {
		t.Errorf("processes of exit_with in the capture: %q; want only the one with an environment (arg 2)", seen)
	}
}

// Every fork image of a shell loop is replaced by its exec, even when the
// exec'd program has already exited by the time the agent looks: none is
// reported as having died without explanation.
func TestForkExecLoopStatuses(t *testing.T) {
	capPath := filepath.Join(t.TempDir(), "loop.hlc")
	const n = 300
	res := run(t, 2*time.Minute, heaplensBin(t), "run", "-q", "-o", capPath, "--", "bash", "-c",
		fmt.Sprintf("for i in $(seq %d); do /bin/true; done", n))
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	c := load(t, capPath)
	count := map[string]int{}
	for _, p := range c.Processes {
		e := c.Ends[p.Stream]
		switch {
		case e == nil:
			count["no end"]++
		case e.Exec:
			count["exec"]++
		case e.Known && !e.Signaled && e.ExitCode == 0:
			count["exited 0"]++
		default:
			count["other"]++
		}
	}
	// n fork images and the $(seq) subshell exec; n trues, seq and bash exit 0.
	if count["exec"] != n+1 || count["exited 0"] != n+2 || count["other"]+count["no end"] != 0 {
		t.Errorf("statuses %v, want %d exec, %d exited 0, nothing else", count, n+1, n+2)
	}
}

// A process of the tree that runs without the library is named in the
// report with the reason: a static binary, a child whose environment lost
// LD_PRELOAD, a set-user-ID program. A profiled one is not.
func TestUnprofiledProcessesNamed(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // the set-user-ID program runs as nobody
		t.Fatal(err)
	}
	dyn := build(t, dir, "hold.c")
	static := filepath.Join(dir, "hold-static")
	if b, err := exec.Command("gcc", "-O2", "-static", "-o", static, filepath.Join(root, "test", "workloads", "hold.c")).CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s (libc6-dev provides libc.a)", err, b)
	}
	suid := filepath.Join(dir, "hold-suid")
	if b, err := exec.Command("sh", "-c", fmt.Sprintf("cp %s %s && chown nobody %s && chmod u+s %s", dyn, suid, suid, suid)).CombinedOutput(); err != nil {
		t.Fatalf("set-user-ID copy: %v\n%s", err, b)
	}
	profiled := filepath.Join(dir, "hold-profiled")
	if err := os.Link(dyn, profiled); err != nil {
		t.Fatal(err)
	}
	capPath := filepath.Join(dir, "unprof.hlc")
	script := fmt.Sprintf("%s 1 500; env -u LD_PRELOAD %s 1 500; %s 1 500; %s 1 500", static, dyn, suid, profiled)
	res := run(t, 2*time.Minute, heaplensBin(t), "run", "-o", capPath, "--", "sh", "-c", script)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	d := reportJSON(t, capPath, "--view", "leaks")
	notes := strings.Join(d.Notes, "\n")
	for _, want := range []string{
		"(" + static + ") ran unprofiled: it is statically linked",
		"(" + dyn + ") ran unprofiled: its environment does not pass on heaplens's LD_PRELOAD",
		"(" + suid + ") ran unprofiled: it is a set-user-ID or set-group-ID program",
	} {
		if !strings.Contains(notes, want) || !strings.Contains(res.stderr, want) {
			t.Errorf("neither report nor run says %q:\nreport notes:\n%s\nrun:\n%s", want, notes, res.stderr)
		}
	}
	if strings.Contains(notes, profiled) {
		t.Errorf("the profiled process is named as unprofiled:\n%s", notes)
	}
	for _, p := range d.Processes { // env's image was replaced by the one it exec'd
		if strings.Contains(p.Status, "unknown") {
			t.Errorf("pid %d: %s", p.PID, p.Status)
		}
	}
}
