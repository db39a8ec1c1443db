package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/heap"
)

// Programs that retitle, sandbox or limit themselves (issue 42).

// ourFiles lists the files in dir that the library names its own: a ring
// written outside its private directory lands there.
func ourFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		for _, p := range []string{"ring.", "new.", "unprofiled.", "unwind."} {
			if strings.HasPrefix(e.Name(), p) {
				out[filepath.Join(dir, e.Name())] = true
			}
		}
	}
	return out
}

// A program that moves its environment and writes a title over the old
// block (setproctitle, as nginx and sshd do) keeps being profiled in the
// children it forks after that: the library copied its directory at start.
// It kept a pointer into the block, and each child made a 16 MiB ring in /
// and ran unprofiled. The last child execs a shell, which must still see
// the moved environment. A child whose environment keeps LD_PRELOAD but
// loses heaplens's settings runs unprofiled, and the run says why.
func TestRetitledEnvironment(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "retitle.c")
	work := filepath.Join(dir, "cwd")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	before := ourFiles(t, "/")
	capPath := filepath.Join(dir, "retitle.hlc")
	res := runIn(t, work, []string{"RETITLE_CHECK=moved"}, heaplensBin(t), "run", "-o", capPath, "--rate", "1", "--", bin)
	if res.code != 0 || res.stdout != "moved\nchildren ok 8 of 8\n" {
		t.Fatalf("exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	for _, d := range []string{"/", work} {
		for f := range ourFiles(t, d) {
			if !before[f] {
				t.Errorf("the library wrote %s, outside its private directory", f)
				if d == "/" {
					os.Remove(f)
				}
			}
		}
	}
	c := load(t, capPath)
	leaks := heap.Leaks(c, heap.Options{})
	kids := 0
	for _, p := range c.Processes {
		if got := streamSite(c, leaks, p.Stream, "", 0, "child_keep"); got > 0 {
			kids++
			if got != 10*100000 {
				t.Errorf("child %d keeps %.0f bytes at child_keep, want 1000000", p.PID, got)
			}
		}
	}
	if kids != 8 {
		t.Errorf("%d children with child_keep in the capture, want 8 (of %d streams)\n%s", kids, len(c.Processes), res.stderr)
	}

	// The settings lost on the way to an exec: a shell keeps LD_PRELOAD alone.
	res = runIn(t, work, nil, heaplensBin(t), "run", "-o", filepath.Join(dir, "lost.hlc"), "--",
		"bash", "-c", `env -i LD_PRELOAD="$LD_PRELOAD" sleep 1; echo done`)
	if res.code != 0 || res.stdout != "done\n" {
		t.Fatalf("exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	if !regexp.MustCompile(`pid \d+ \(\S*sleep\) ran unprofiled: its environment kept heaplens's LD_PRELOAD but lost its settings`).MatchString(res.stderr) {
		t.Errorf("the run does not say why sleep ran unprofiled:\n%s", res.stderr)
	}
}

// nginx retitles its master and workers (ngx_setproctitle) and forks its
// workers after that: each worker is profiled, with stacks through
// ngx_spawn_process where the master forked it, and no file appears
// outside the private directory. The workers serve a few requests, then
// the master is told to quit (SIGQUIT, a graceful shutdown) and exits 0.
func TestRetitledNginx(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		nginx = "/usr/sbin/nginx"
	}
	if _, err := os.Stat(nginx); err != nil {
		t.Log("!!! nginx is not installed (scripts/deps.sh installs Debian's nginx): this test cannot run")
		t.Fatal(err)
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := fmt.Sprintf(`daemon off;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server { listen %[2]s; location / { return 200 "hello\n"; } }
}
`, dir, addr)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	before := ourFiles(t, "/")
	capPath := filepath.Join(dir, "nginx.hlc")
	cmd := exec.Command(heaplensBin(t), "run", "-o", capPath, "--rate", "1", "--", nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited, master := false, 0
	defer func() {
		if !exited { // a failure: nginx must not outlive the test
			if master > 0 {
				syscall.Kill(master, syscall.SIGTERM)
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "nginx.pid"))
		master, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if master > 0 {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not start listening on %s within 30 s\n%s", addr, errb.String())
		}
	}
	for i := 0; i < 8; i++ {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello\n" {
			t.Fatalf("request %d: %q, want \"hello\\n\"", i, b)
		}
	}
	syscall.Kill(master, syscall.SIGQUIT)
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("heaplens run nginx: %v, want exit 0\n%s", err, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("nginx did not quit within a minute of SIGQUIT\n%s", errb.String())
	}
	for f := range ourFiles(t, "/") {
		if !before[f] {
			t.Errorf("the library wrote %s, outside its private directory", f)
			os.Remove(f)
		}
	}
	c := load(t, capPath)
	allocs := heap.Allocs(c, heap.Options{})
	workers := 0
	for _, p := range c.Processes {
		if p.PPID == master && streamSite(c, allocs, p.Stream, "", 0, "ngx_spawn_process") > 0 {
			workers++
		}
	}
	if workers != 2 {
		t.Errorf("%d workers with samples below ngx_spawn_process, want 2 (of %d streams)\n%s", workers, len(c.Processes), errb.String())
	}
}

// sanitizerOutput is a sanitizer's report with what differs from run to
// run (its pid, addresses) blanked out.
func sanitizerOutput(s string) string {
	s = regexp.MustCompile(`==\d+==`).ReplaceAllString(s, "==PID==")
	return regexp.MustCompile(`0x[0-9a-f]+`).ReplaceAllString(s, "0x?")
}

// A program built with a sanitizer that owns the allocator (GCC's ASan,
// TSan, LSan) runs as bare under heaplens run -q: the same exit status,
// output and sanitizer report (LSan's of a deliberate leak included), as
// heaplens does not preload its library into it (before, ASan refused to
// start, TSan crashed at pc 0 and LSan in the library's free), and its
// capture says why it ran unprofiled. When a shell execs it, the library
// it finds there restarts the process without itself, with the
// environment it had (ASAN_OPTIONS, set by the shell or not). UBSan alone is
// profiled: its leak is in the capture to the byte.
func TestSanitizerBuilds(t *testing.T) {
	dir := t.TempDir()
	bins := map[string]string{}
	for _, s := range []string{"address", "thread", "leak", "undefined"} {
		sub := filepath.Join(dir, s)
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		bins[s] = build(t, sub, "sanitized.c", "-fsanitize="+s)
	}
	notes := func(capPath string) string {
		var out []string
		for _, n := range load(t, capPath).Notes {
			out = append(out, n.Text)
		}
		return strings.Join(out, "\n")
	}
	same := func(t *testing.T, what string, bare, res result) {
		t.Helper()
		if res.code != bare.code || res.stdout != bare.stdout || sanitizerOutput(res.stderr) != sanitizerOutput(bare.stderr) {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nbare: exit %d, stdout %q, stderr:\n%s",
				what, res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
		}
	}
	for _, c := range []struct{ san, name string }{{"address", "AddressSanitizer"}, {"thread", "ThreadSanitizer"}, {"leak", "LeakSanitizer"}} {
		t.Run(c.san, func(t *testing.T) {
			bin := bins[c.san]
			bare := run(t, time.Minute, bin)
			if !strings.Contains(bare.stdout, "total 49950000") || (c.san != "thread") != strings.Contains(bare.stderr, "4000 byte(s) leaked") {
				t.Fatalf("the bare run is not as the test expects (exit %d, stdout %q):\n%s", bare.code, bare.stdout, bare.stderr)
			}
			capPath := filepath.Join(dir, c.san+".hlc")
			same(t, "heaplens run -q", bare, run(t, time.Minute, heaplensBin(t), "run", "-q", "-o", capPath, "--", bin))
			if n := notes(capPath); !strings.Contains(n, "is built with "+c.name) {
				t.Errorf("the capture does not say that the program is built with %s; its notes:\n%s", c.name, n)
			}
		})
	}
	// Exec'd by a shell, which is profiled: the library restarts them without itself.
	script := fmt.Sprintf(`%s; echo "thread: $?"; %s; echo "leak: $?"; %s; echo "address: $?"`, bins["thread"], bins["leak"], bins["address"])
	bare := run(t, time.Minute, "sh", "-c", script)
	if !strings.Contains(bare.stdout, "leak: 23") || !strings.Contains(bare.stdout, "address: 1") {
		t.Fatalf("the bare run is not as the test expects (exit %d, stdout %q):\n%s", bare.code, bare.stdout, bare.stderr)
	}
	capPath := filepath.Join(dir, "execd.hlc")
	same(t, "sh -c under heaplens run -q", bare, run(t, time.Minute, heaplensBin(t), "run", "-q", "-o", capPath, "--", "sh", "-c", script))
	n := notes(capPath)
	// ASAN_OPTIONS of the user's own reaches the ASan program as it was: no leak check, exit 0.
	asan := []string{"ASAN_OPTIONS=detect_leaks=0"}
	bare = runEnv(t, time.Minute, asan, "sh", "-c", script)
	if !strings.Contains(bare.stdout, "address: 0") {
		t.Fatalf("the bare run with ASAN_OPTIONS=detect_leaks=0 is not as the test expects (exit %d, stdout %q):\n%s", bare.code, bare.stdout, bare.stderr)
	}
	same(t, "sh -c under heaplens run -q, ASAN_OPTIONS=detect_leaks=0", bare,
		runEnv(t, time.Minute, asan, heaplensBin(t), "run", "-q", "-o", filepath.Join(dir, "execd2.hlc"), "--", "sh", "-c", script))
	for _, name := range []string{"ThreadSanitizer", "LeakSanitizer", "AddressSanitizer"} {
		if !regexp.MustCompile(`process \d+ \(sanitized\) ran unprofiled: it is built with ` + name + `.*restarted`).MatchString(n) {
			t.Errorf("the capture does not say that a process built with %s was restarted without the library; its notes:\n%s", name, n)
		}
	}
	if strings.Contains(n, "LD_PRELOAD") {
		t.Errorf("a restarted process is also noted as one that lost LD_PRELOAD:\n%s", n)
	}

	// UBSan has no allocator of its own: profiled, the leak to the byte.
	bin := bins["undefined"]
	bare = run(t, time.Minute, bin)
	capPath = filepath.Join(dir, "undefined.hlc")
	res := run(t, time.Minute, heaplensBin(t), "run", "-q", "--rate", "1", "-o", capPath, "--", bin)
	same(t, "UBSan build", bare, res)
	if got := report(t, capPath, "leaks").site("keep_leak"); got != 4000 {
		t.Errorf("the UBSan build leaks %.0f bytes at keep_leak, want 4000", got)
	}
}

// Under an address-space limit (ulimit -v) a command runs as it does bare:
// the same exit status, output and standard error (heaplens run -q), and
// heaplens leaves nothing in /dev/shm. Set around heaplens, the limit was
// heaplens's own: the Go runtime alone reserves over a gigabyte, and it
// died at start ("failed to reserve page summary memory") or mid-run. Now
// it raises its soft limit where it may and gives the command the one it
// was started with; below 3 GiB it runs the command unprofiled, saying so
// unless -q. Set inside the command, the limit is the program's, which its
// ring (16 MiB) counted against: the ring takes 1/256 of a finite limit,
// and the run says so; under 16 MiB there is none, and the run says why. Each case runs in a mount namespace with a /dev/shm
// of its own, to see what is left in it.
func TestAddressSpaceLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("!!! this test mounts a private /dev/shm (unshare -m, mount -t tmpfs): run it as root")
		t.Fatal("not root")
	}
	script := filepath.Join(root, "test", "workloads", "aslimit.py")
	const py = "/usr/bin/python3"
	hl := heaplensBin(t)
	dir := t.TempDir()
	// sh -c in a private /dev/shm; what is left in it is printed last, on standard error.
	inShm := func(cmd string) result {
		t.Helper()
		return run(t, 3*time.Minute, "unshare", "-m", "sh", "-c",
			`mount -t tmpfs tmpfs /dev/shm && `+cmd+`; s=$?; echo "left in /dev/shm: $(ls -A /dev/shm)" >&2; exit $s`)
	}
	cases := []struct {
		name, bare, profiled string
		profiledToo          bool // the program is profiled, not run unprofiled
	}{}
	// Limits half a block past a whole number of blocks above what the bare
	// program maps before its first block, so that a few megabytes more or
	// less do not change its answer (the library's own mappings, ~6 MiB,
	// cannot be helped).
	probe := run(t, time.Minute, py, "-c", "import mmap, resource; print([l for l in open('/proc/self/status') if l.startswith('VmSize:')][0].split()[1])")
	base, err := strconv.Atoi(strings.TrimSpace(probe.stdout))
	if err != nil {
		t.Fatalf("python's VmSize: %q: %v", probe.stdout, err)
	}
	for _, blocks := range []int{3, 10, 26} { // the last leaves heaplens over 3 GiB: it profiles
		kib := base + blocks*128<<10 + 64<<10
		limit := fmt.Sprintf("ulimit -v %d; ", kib)
		cases = append(cases, struct {
			name, bare, profiled string
			profiledToo          bool
		}{
			fmt.Sprintf("around heaplens, %d KiB", kib),
			limit + py + " " + script,
			limit + hl + " run -q -o " + filepath.Join(dir, strconv.Itoa(kib)+"a.hlc") + " -- " + py + " " + script,
			kib*1024 >= 3<<30,
		}, struct {
			name, bare, profiled string
			profiledToo          bool
		}{
			fmt.Sprintf("inside the command, %d KiB", kib),
			"bash -c '" + limit + py + " " + script + "'",
			hl + " run -q -o " + filepath.Join(dir, strconv.Itoa(kib)+"b.hlc") + " -- bash -c '" + limit + py + " " + script + "'",
			true,
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bare := inShm(c.bare)
			if !strings.Contains(bare.stdout, "blocks ") {
				t.Fatalf("the bare run is not as the test expects: exit %d, stdout %q\n%s", bare.code, bare.stdout, bare.stderr)
			}
			res := inShm(c.profiled)
			if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
				t.Errorf("exit %d, stdout %q, stderr %q; bare: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
			}
			capPath := c.profiled[strings.Index(c.profiled, " -o ")+4:]
			capPath = capPath[:strings.IndexByte(capPath, ' ')]
			_, err := os.Stat(capPath)
			if c.profiledToo != (err == nil) {
				t.Errorf("capture %s exists: %v, want %v (profiled)", capPath, err == nil, c.profiledToo)
			}
			if c.profiledToo && err == nil && strings.HasPrefix(c.name, "inside") {
				c := load(t, capPath)
				var notes []string
				for _, n := range c.Notes {
					notes = append(notes, n.Text)
				}
				if !strings.Contains(strings.Join(notes, "\n"), "under an address-space limit") {
					t.Errorf("no note of the smaller rings under the limit; the notes:\n%s", strings.Join(notes, "\n"))
				}
			}
		})
	}
	// A limit too small for even the smallest ring (64 KiB at 1/256 of it):
	// the process runs unprofiled, as bare, and the run says why.
	exitWith := build(t, dir, "exit_with.c")
	tiny := "ulimit -v 8000; exec " + exitWith + " 3"
	bare := run(t, time.Minute, "bash", "-c", tiny)
	if bare.code != 3 {
		t.Fatalf("exit_with under an 8000 KiB limit: exit %d, stdout %q\n%s", bare.code, bare.stdout, bare.stderr)
	}
	res := run(t, time.Minute, hl, "run", "-o", filepath.Join(dir, "tiny.hlc"), "--", "bash", "-c", tiny)
	if res.code != bare.code || res.stdout != bare.stdout {
		t.Errorf("under an 8000 KiB limit: exit %d, stdout %q; bare: exit %d, stdout %q", res.code, res.stdout, bare.code, bare.stdout)
	}
	if !strings.Contains(res.stderr, "(exit_with) ran unprofiled: its address-space limit (RLIMIT_AS, ulimit -v) of 8000 KiB leaves no room") {
		t.Errorf("the run does not say why exit_with ran unprofiled:\n%s", res.stderr)
	}

	// Not quiet, the unprofiled run says why.
	res = inShm(fmt.Sprintf("ulimit -v %d; ", base+3*128<<10+64<<10) + hl + " run -o " + filepath.Join(dir, "loud.hlc") + " -- " + py + " " + script)
	if !strings.Contains(res.stderr, "heaplens: the address-space limit (ulimit -v) leaves heaplens too little room to run") {
		t.Errorf("the run does not say why the command ran unprofiled:\n%s", res.stderr)
	}
}

// A program that installs a kill-by-default seccomp filter (through prctl,
// or syscall(SYS_seccomp) as libseccomp does) lists the system calls it
// makes, not the library's: the library mapped an unwind table after it
// and the program died of SIGSYS. Now the library makes no new system
// call once the filter goes in: the program runs as bare, its allocations
// after the filter are all in the profile (--rate 1: to the byte, stacks
// from libgcc's unwinder), and its fork child, which would need a ring,
// and a program it execs run unprofiled, as the run says; the ring,
// backed whole, is not counted in the program's RSS. heaplens under a
// filter of its own (a container's) profiles the program all the same.
func TestSeccompSandbox(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "sandbox.c")
	for _, how := range []string{"prctl", "seccomp"} {
		t.Run(how, func(t *testing.T) {
			bare := run(t, time.Minute, bin, how)
			if bare.code != 0 || !strings.Contains(bare.stdout, "child ok") {
				t.Fatalf("the bare run fails under its own filter: exit %d, stdout %q\n%s", bare.code, bare.stdout, bare.stderr)
			}
			capPath := filepath.Join(dir, how+".hlc")
			res := run(t, time.Minute, heaplensBin(t), "run", "-q", "--rate", "1", "-o", capPath, "--", bin, how)
			if res.code != bare.code || res.stdout != bare.stdout || res.stderr != bare.stderr {
				t.Fatalf("exit %d, stdout %q, stderr %q; bare: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr, bare.code, bare.stdout, bare.stderr)
			}
			if got := report(t, capPath, "leaks").site("keep_after"); got != 1000*4096 {
				t.Errorf("keep_after, after the filter: %.0f bytes, want %d", got, 1000*4096)
			}
			c := load(t, capPath)
			var notes []string
			for _, n := range c.Notes {
				notes = append(notes, n.Text)
			}
			// The ring, backed whole (64 MiB at --rate 1) as the filter went in, is heaplens's, not the program's RSS.
			high := 0
			for _, r := range c.RSS {
				if r.Bytes > 32<<20 {
					high++
				}
			}
			if high > 0 {
				t.Errorf("%d of %d RSS readings over 32 MiB: the ring is counted as the program's (it keeps 4 MiB)", high, len(c.RSS))
			}
			if !regexp.MustCompile(`pid \d+ \(\S*sandbox\) ran unprofiled: it runs under a seccomp filter`).MatchString(strings.Join(notes, "\n")) {
				t.Errorf("the fork child under the filter is not noted as unprofiled; the notes:\n%s", strings.Join(notes, "\n"))
			}
		})
	}
	// Exec'd under the program's filter: the library makes no ring (its
	// system calls would kill the process), the process runs as bare and
	// the run says why. (A copy: an image of the same file is not told apart.)
	cp := filepath.Join(dir, "sandbox-execd")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(cp, b, 0o755) != nil {
		t.Fatalf("copying %s: %v", bin, err)
	}
	bare := run(t, time.Minute, bin, "exec", cp)
	if bare.code != 0 || bare.stdout != "execd kept\n" {
		t.Fatalf("the bare run fails under its own filter: exit %d, stdout %q\n%s", bare.code, bare.stdout, bare.stderr)
	}
	execd := run(t, time.Minute, heaplensBin(t), "run", "--rate", "1", "-o", filepath.Join(dir, "exec.hlc"), "--", bin, "exec", cp)
	if execd.code != 0 || execd.stdout != bare.stdout {
		t.Errorf("exec'd under the filter: exit %d, stdout %q; bare: %q\n%s", execd.code, execd.stdout, bare.stdout, execd.stderr)
	}
	if !regexp.MustCompile(`pid \d+ \(\S*sandbox-execd\) ran unprofiled: it runs under a seccomp filter`).MatchString(execd.stderr) {
		t.Errorf("the image exec'd under the filter is not noted as unprofiled:\n%s", execd.stderr)
	}

	// heaplens itself under a filter, as everything in a container is: that
	// one is not the program's, which is profiled as ever.
	capPath := filepath.Join(dir, "container.hlc")
	res := run(t, time.Minute, bin, "container", heaplensBin(t), "run", "--rate", "1", "-o", capPath, "--", bin, "prctl")
	if res.code != 0 || !strings.Contains(res.stdout, "child ok") {
		t.Fatalf("in a container: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	if got := report(t, capPath, "leaks").site("keep_after"); got != 1000*4096 {
		t.Errorf("in a container, keep_after: %.0f bytes, want %d\n%s", got, 1000*4096, res.stderr)
	}
}
