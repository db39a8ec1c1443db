package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/symbolize"
	"github.com/heaplens/heaplens/test/testenv"
	"golang.org/x/sys/unix"
)

// ctr is a program in a container as Docker makes one: its own mount and
// PID namespace, the Debian 11 root of make oldroot (glibc 2.31,
// python3.9: none of its files is the host's) as its root file system, a
// fresh /proc and tmpfs /dev/shm, and a directory of the test's as its
// /tmp (so that the test sees what is left there).
type ctr struct {
	*target
	root string // its root file system, on the host
	tmp  string // its /tmp, on the host
	host int    // its pid as the host sees it
	ns   int    // its pid in its own namespace
}

// containerScript makes, in the mount namespace unshare made, the
// container's root file system as runc does: $0, bind-mounted on itself
// with a fresh /proc, a tmpfs /dev/shm and /tmp the directory $1 (unless
// $1 is empty: bound already), becomes the root with pivot_root, the old
// one unmounted; then the command runs. Its memory maps then name its
// files by its own paths, as a Docker container's do.
const containerScript = `r=$0; t=$1; shift; mount --rbind "$r" "$r" && { [ -z "$t" ] || mount --bind "$t" "$r/tmp"; } && ` +
	`mount -t proc proc "$r/proc" && mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm" && ` +
	`cd "$r" && pivot_root . mnt && exec chroot . /bin/sh -c 'umount -l /mnt && exec "$0" "$@"' "$@"`

// containerArgs are the unshare command line of a container whose root is
// rootDir and /tmp tmp. A rootless one is made as rootless Podman makes
// one: a user namespace of uid 65534 (nobody), whose root it maps to,
// owns its namespaces; the root and /tmp are bound first, as root, where
// nobody can reach them (mnt, an empty directory others may traverse).
func containerArgs(rootDir, tmp, mnt string, rootless bool, args ...string) []string {
	inner := []string{"--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", containerScript}
	if !rootless {
		return append(append(inner, rootDir, tmp), args...)
	}
	inner = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "--user", "--map-root-user"}, inner...)
	outer := `m=$0; r=$1; t=$2; shift 2; mount --bind "$r" "$m" && mount --bind "$t" "$m/tmp" && exec "$@"`
	return append([]string{"--mount", "--propagation", "private", "sh", "-c", outer, mnt, rootDir, tmp},
		append(append(inner, mnt, ""), args...)...)
}

// openDir is a new directory that every user may use (a rootless
// container's files, a capture heaplens writes as nobody), removed when t ends.
func openDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	d, err := os.MkdirTemp("", "heaplens-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	return d
}

// oldRootContainer returns the Debian 11 root, failing loudly when it is
// missing (testenv.OldRoot).
func oldRootContainer(t *testing.T) (testenv.Chroot, bool) {
	t.Helper()
	r, ok := testenv.OldRoot(t)
	if ok {
		if _, err := os.Stat(filepath.Join(r.Dir, "usr/bin/python3.9")); err != nil {
			testenv.Missing(t, "no python3.9 in %s: the container tests do NOT run", r.Dir)
			return r, false
		}
	}
	return r, ok
}

// startContainer runs args (paths of the container) in a new container
// whose /tmp is tmp (log, if set, is a file there the workload logs its
// leaks in), and waits until its program runs.
func startContainer(t *testing.T, r testenv.Chroot, tmp, log string, args ...string) *ctr {
	return startContainerAs(t, r, false, tmp, log, args...)
}

// startContainerAs is startContainer for a rootless container too.
func startContainerAs(t *testing.T, r testenv.Chroot, rootless bool, tmp, log string, args ...string) *ctr {
	t.Helper()
	ua := containerArgs(r.Dir, tmp, openDir(t, 0o755), rootless, args...)
	c := &ctr{target: startTarget(t, log, "unshare", ua...), root: r.Dir, tmp: tmp}
	t.Cleanup(func() {
		if c.running() {
			c.cmd.Process.Kill()
		}
	})
	// The program is the first child of the unshare that made the PID
	// namespace (sh, which exec's chroot, sh and the program in turn).
	want := filepath.Base(args[0])
	waitFor(t, "the container's program to start", func() bool {
		for p := c.pid(); ; {
			kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
			f := strings.Fields(string(kids))
			if len(f) != 1 {
				return false
			}
			p, _ = strconv.Atoi(f[0])
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p))
			if strings.HasPrefix(filepath.Base(exe), want) {
				c.host = p
				return true
			}
		}
	})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.host))
	if m := regexp.MustCompile(`NSpid:\s+\d+\s+(\d+)`).FindSubmatch(status); err == nil && m != nil {
		c.ns, _ = strconv.Atoi(string(m[1]))
	} else {
		t.Fatalf("pid %d: no NSpid of another namespace in its status (%v)", c.host, err)
	}
	if log != "" {
		c.waitLog(t)
	}
	return c
}

// leftovers lists what of heaplens's is in the container's /tmp and /dev/shm.
func (c *ctr) leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, d := range []string{c.tmp, fmt.Sprintf("/proc/%d/root/dev/shm", c.host)} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatalf("the container's %s: %v", d, err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "heaplens") {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	return out
}

// containerTwins starts pyserver.py in two containers, one to run
// undisturbed and one to attach to.
func containerTwins(t *testing.T, r testenv.Chroot, seconds string) (bare, tg *ctr) {
	return containerTwinsAs(t, r, false, seconds)
}

// containerTwinsAs is containerTwins for rootless containers too.
func containerTwinsAs(t *testing.T, r testenv.Chroot, rootless bool, seconds string) (bare, tg *ctr) {
	t.Helper()
	script, err := os.ReadFile(filepath.Join(root, "test", "workloads", "pyserver.py"))
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*ctr
	for i := range cs {
		tmp := tmpWith(t, "pyserver.py", script, 0o644)
		cs[i] = startContainerAs(t, r, rootless, tmp, filepath.Join(tmp, "log"), "/usr/bin/python3.9", "/tmp/pyserver.py", seconds, "/tmp/log")
	}
	return cs[0], cs[1]
}

// tmpWith is a container's /tmp (sticky, open to all) holding a file.
func tmpWith(t *testing.T, name string, b []byte, perm os.FileMode) string {
	t.Helper()
	tmp := openDir(t, 0o777|os.ModeSticky)
	if err := os.WriteFile(filepath.Join(tmp, name), b, perm); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// buildID is the GNU build ID of a file.
func buildID(t *testing.T, path string) string {
	t.Helper()
	f, err := symbolize.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.BuildID()
}

// checkContainerFiles checks that the capture's modules are the
// container's: named by its paths, with the build IDs of its files (its
// python3.9 and libc 2.31, which the host does not have), and that the
// interpreter's native frames are named from its symbols.
func checkContainerFiles(t *testing.T, capPath, rootDir string) {
	t.Helper()
	c := load(t, capPath)
	files := map[string]*capture.Mapping{}
	for _, m := range c.Mappings {
		files[m.File] = m
	}
	// The host has a libc.so.6 at that path too: its own glibc.
	for _, want := range []string{"/usr/bin/python3.9", "/lib/x86_64-linux-gnu/libc.so.6"} {
		m := files[want]
		if m == nil {
			var got []string
			for f := range files {
				got = append(got, f)
			}
			t.Errorf("%s: no mapping of the container's %s; mappings: %v", capPath, want, got)
			continue
		}
		if id := buildID(t, filepath.Join(rootDir, want)); m.BuildID != id {
			t.Errorf("%s: %s has build ID %q, the container's file %q", capPath, want, m.BuildID, id)
		}
		if _, err := os.Stat(want); err == nil && buildID(t, want) == m.BuildID {
			t.Errorf("%s: %s has the build ID of the host's file of that name", capPath, want)
		}
	}
	named := 0
	for _, l := range c.Locations {
		if m := c.Mappings[l.MappingID]; m != nil && m.File == "/usr/bin/python3.9" && len(l.Lines) > 0 && strings.HasPrefix(l.Lines[0].Function, "Py") {
			named++
		}
	}
	if named == 0 {
		t.Errorf("%s: no native frame of the container's python3.9 named from its symbols (Py…)", capPath)
	}
}

// TestAttachContainer: a Python service in a container (its own mount and
// PID namespace and root file system) is attached to from the host for
// 4 s, then from a sidecar (its PID namespace, the host's files) twice,
// then from the host serving /debug/pprof/heap;
// each session finds the leak at its site, with the container's file
// paths, pids (and the host's beside them) and interpreter's symbols. Then
// heaplens is SIGKILLed while attached: the service runs on and nothing of
// heaplens's stays in its /tmp or /dev/shm; 20 attach/detach cycles follow;
// the service prints and exits exactly as an undisturbed twin.
func TestAttachContainer(t *testing.T) {
	t.Parallel() // mostly waiting for its services: beside the other container tests
	r, ok := oldRootContainer(t)
	if !ok {
		return
	}
	hl := heaplensBin(t)
	dir := t.TempDir()
	bare, tg := containerTwins(t, r, "45")
	pid := strconv.Itoa(tg.host)

	t.Run("host", func(t *testing.T) {
		capPath := filepath.Join(dir, "host.hlc")
		res := run(t, time.Minute, hl, "attach", pid, "--duration", "4s", "--native-python-internals", "-o", capPath)
		if res.code != 0 {
			t.Fatalf("attach: exit %d\n%s", res.code, res.stderr)
		}
		where := fmt.Sprintf("attached to pid %d in another mount and PID namespace (a container), pid %d there", tg.host, tg.ns)
		window := fmt.Sprintf("to pid %d of its container's PID namespace (pid %d in heaplens's)", tg.ns, tg.host)
		if !strings.Contains(res.stderr, where) || !strings.Contains(res.stderr, window) {
			t.Errorf("attach's output names not both pids (%q, %q):\n%s", where, window, res.stderr)
		}
		// The capture's pids are the container's, as its paths are.
		if c := load(t, capPath); c.Meta.AttachedHostPID != tg.host {
			t.Errorf("Meta.AttachedHostPID %d, want %d", c.Meta.AttachedHostPID, tg.host)
		}
		checkLeakFound(t, capPath, tg.ns, tg.log, 512<<10)
		checkContainerFiles(t, capPath, r.Dir)
		if txt := reportText(t, capPath); !strings.Contains(txt, "leak_slowly (/tmp/pyserver.py:") {
			t.Errorf("the leak is not reported at the container's path of the script:\n%.2000s", txt)
		}
	})
	if left := tg.leftovers(t); len(left) > 0 {
		t.Errorf("after a detach, heaplens left %v in the container", left)
	}

	t.Run("sidecar", func(t *testing.T) {
		// A sidecar: in the container's PID namespace, with a mount
		// namespace of its own (the host's files), where its /proc shows
		// the container's pids. The second has no CAP_SYS_ADMIN, as
		// kubectl debug --profile=general gives none: map_files is closed
		// to it, and the container's files are read through its root.
		for i, drop := range []string{"", "setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin"} {
			capPath := filepath.Join(dir, fmt.Sprintf("sidecar-%d.hlc", i))
			res := run(t, time.Minute, "nsenter", "-t", pid, "--pid", "--", "unshare", "--mount", "--fork", "--propagation", "private",
				"sh", "-c", `mount -t proc proc /proc && exec `+drop+` "$0" "$@"`, hl, "attach", strconv.Itoa(tg.ns), "--duration", "2s", "-o", capPath, "-q")
			if res.code != 0 {
				t.Fatalf("attach from the sidecar: exit %d\n%s", res.code, res.stderr)
			}
			checkLeakFound(t, capPath, tg.ns, tg.log, 512<<10)
			checkContainerFiles(t, capPath, r.Dir)
		}
	})

	t.Run("pprof", func(t *testing.T) {
		// Continuously, without a restart: the running service's heap over HTTP while attached.
		cmd := exec.Command(hl, "attach", pid, "--pprof-addr", "127.0.0.1:0", "--duration", "3s", "-o", filepath.Join(dir, "pprof.hlc"), "-q")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		urlRe := regexp.MustCompile(`pprof endpoints at (http://\S+)`)
		waitFor(t, "the pprof address", func() bool { return urlRe.MatchString(stderr.String()) })
		time.Sleep(2 * time.Second)
		p := fetchProfile(t, urlRe.FindStringSubmatch(stderr.String())[1]+"heap")
		found := false
		for _, f := range p.Function {
			found = found || (f.Name == "leak_slowly" && f.Filename == "/tmp/pyserver.py")
		}
		if !found {
			t.Errorf("/debug/pprof/heap while attached has no leak_slowly in the container's /tmp/pyserver.py")
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("attach --pprof-addr: %v\n%s", err, stderr.String())
		}
	})

	t.Run("sigkill", func(t *testing.T) {
		cmd := exec.Command(hl, "attach", pid, "-o", filepath.Join(dir, "killed.hlc"), "-q")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the attach", func() bool { return strings.Contains(stderr.String(), "attached to pid") })
		time.Sleep(500 * time.Millisecond)
		if left := tg.leftovers(t); len(left) != 1 || !strings.Contains(left[0], "/dev/shm/heaplens-") {
			t.Errorf("while attached, the container holds %v of heaplens's; want its session directory in /dev/shm alone", left)
		}
		cmd.Process.Kill()
		cmd.Wait()
		// The library misses the agent's heartbeat within 5 s, ends the
		// session at a hook's next call and removes its ring and directory.
		deadline := time.Now().Add(20 * time.Second)
		for len(tg.leftovers(t)) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if left := tg.leftovers(t); len(left) > 0 {
			t.Errorf("20 s after heaplens was killed, the container holds %v", left)
		}
		if !tg.running() {
			t.Fatalf("the service ended with heaplens: %+v", tg.res)
		}
	})

	t.Run("cycles", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			capPath := filepath.Join(dir, fmt.Sprintf("cycle-%d.hlc", i))
			res := run(t, time.Minute, hl, "attach", pid, "--rate", "1", "--duration", "300ms", "-o", capPath, "-q")
			if res.code != 0 {
				t.Fatalf("cycle %d: exit %d\n%s", i, res.code, res.stderr)
			}
			checkLeakFound(t, capPath, tg.ns, tg.log, 1)
		}
		if left := tg.leftovers(t); len(left) > 0 {
			t.Errorf("after 20 cycles, the container holds %v", left)
		}
	})
	if !tg.running() {
		t.Fatalf("the service ended before the sessions did; make it run longer: %+v", tg.res)
	}
	sameAsBare(t, bare.target, tg.target)
}

// containerStorm builds attachstorm in the container's root (its gcc and
// libgomp), runs it with args in two containers, attaches to one for 2 s
// at rate a second after its start, and checks that it ran as the other.
func containerStorm(t *testing.T, r testenv.Chroot, rate string, args ...string) (capPath string, tg *ctr) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "test", "workloads", "attachstorm.c"))
	if err != nil {
		t.Fatal(err)
	}
	build := t.TempDir()
	os.WriteFile(filepath.Join(build, "attachstorm.c"), src, 0o644)
	res := run(t, 2*time.Minute, "unshare", "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", containerScript, r.Dir, build,
		"gcc", "-O2", "-g", "-pthread", "-fopenmp", "-o", "/tmp/attachstorm", "/tmp/attachstorm.c")
	if res.code != 0 {
		t.Fatalf("gcc in the container: exit %d\n%s", res.code, res.stderr)
	}
	bin, err := os.ReadFile(filepath.Join(build, "attachstorm"))
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*ctr
	for i := range cs {
		tmp := tmpWith(t, "attachstorm", bin, 0o755)
		cs[i] = startContainer(t, r, tmp, "", append([]string{"/tmp/attachstorm"}, args...)...)
	}
	time.Sleep(time.Second)
	capPath = attachFor(t, t.TempDir(), cs[1].host, 2*time.Second, rate)
	if cs[1].running() {
		if left := cs[1].leftovers(t); len(left) > 0 {
			t.Errorf("after the session, the container holds %v", left)
		}
	}
	sameAsBare(t, cs[0].target, cs[1].target)
	return capPath, cs[1]
}

// TestAttachContainerForkStorm: attached from the host in the middle of a
// fork storm in a container, the program runs as it would, and the
// children it forks meanwhile are profiled (under the container's pids); so
// are OpenMP regions opened meanwhile (the container's libgomp).
func TestAttachContainerForkStorm(t *testing.T) {
	r, ok := oldRootContainer(t)
	if !ok {
		return
	}
	t.Run("fork", func(t *testing.T) {
		capPath, tg := containerStorm(t, r, "1", "fork", "1500")
		checkStormChildren(t, capPath, tg.ns)
	})
	t.Run("omp", func(t *testing.T) {
		if !*platformsFull {
			t.Skip("!!! OpenMP regions in a container are checked by make test-platforms (-platforms), not here: they add ~10 s")
		}
		capPath, _ := containerStorm(t, r, "64KiB", "omp", "200")
		checkRegionsAttached(t, capPath)
	})
}

// asNobody runs heaplens as uid 65534 (nobody), with no capability; with
// userns, as root of a user namespace of its own, rootless.
func asNobody(t *testing.T, userns bool, args ...string) result {
	t.Helper()
	argv := []string{"--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/nonexistent"}
	if userns {
		argv = append(argv, "unshare", "--user", "--map-root-user")
	}
	return run(t, time.Minute, "setpriv", append(append(argv, heaplensBin(t)), args...)...)
}

// TestAttachRootlessContainer: a Python service in a rootless container
// (a user namespace of an unprivileged user owns its namespaces) is
// attached to by that user, without any privilege (no map_files: its
// files are read through its root, the library from heaplens's own copy
// once its copy in the container is gone), then by root, then by that user
// again; each session finds its leak, nothing stays in the container, and
// the service prints and exits as an undisturbed twin.
func TestAttachRootlessContainer(t *testing.T) {
	t.Parallel() // mostly waiting for its services: beside the other container tests
	r, ok := oldRootContainer(t)
	if !ok {
		return
	}
	bare, tg := containerTwinsAs(t, r, true, "14")
	out := openDir(t, 0o777)
	for i, who := range []string{"nobody", "root", "nobody"} {
		capPath := filepath.Join(out, fmt.Sprintf("%s-%d.hlc", who, i))
		args := []string{"attach", strconv.Itoa(tg.host), "--duration", "2s", "-o", capPath, "-q"}
		var res result
		if who == "root" {
			res = run(t, time.Minute, heaplensBin(t), args...)
		} else {
			res = asNobody(t, false, args...)
		}
		if res.code != 0 {
			t.Fatalf("attach as %s: exit %d\n%s%s", who, res.code, res.stdout, res.stderr)
		}
		checkLeakFound(t, capPath, tg.ns, tg.log, 512<<10)
		checkContainerFiles(t, capPath, r.Dir)
		if left := tg.leftovers(t); len(left) > 0 {
			t.Errorf("after the session as %s, the container holds %v", who, left)
		}
	}
	sameAsBare(t, bare.target, tg.target)
}

// TestAttachContainerRefusals: what heaplens may not or must not attach to
// in a container is refused with the reason, and the program runs on
// untouched: heaplens as root of a rootless user namespace (no
// CAP_SYS_PTRACE outside it), heaplens as another unprivileged user than a
// rootless container's, a program under a seccomp filter, a program
// another tracer traces.
func TestAttachContainerRefusals(t *testing.T) {
	t.Parallel() // mostly waiting for its services: beside the other container tests
	r, ok := oldRootContainer(t)
	if !ok {
		return
	}
	// A server under a seccomp filter that refuses an mmap with PROT_EXEC.
	build := containerAttachserver(t, r)
	filtered := startContainer(t, r, build, filepath.Join(build, "noexec.log"), "/tmp/attachserver", "60", "noexec", "/tmp/noexec.log")
	sleeper := startContainer(t, r, openDir(t, 0o777|os.ModeSticky), "", "/bin/sleep", "60")
	rootless := startContainerAs(t, r, true, openDir(t, 0o777|os.ModeSticky), "", "/bin/sleep", "60")
	traced := startContainer(t, r, openDir(t, 0o777|os.ModeSticky), "", "/bin/sleep", "60")
	seized := make(chan error)
	release := make(chan struct{})
	go func() {
		// A tracer: this thread seizes the program (which goes on running)
		// and holds it until the thread ends.
		runtime.LockOSThread()
		seized <- unix.PtraceSeize(traced.host)
		<-release
	}()
	if err := <-seized; err != nil {
		t.Fatalf("PTRACE_SEIZE: %v", err)
	}
	cases := []struct {
		name string
		res  result
		want string
	}{
		{"rootless heaplens", asNobody(t, true, "attach", strconv.Itoa(sleeper.host)), "has no CAP_SYS_PTRACE"},
		{"another user", run(t, time.Minute, "setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", heaplensBin(t), "attach", strconv.Itoa(rootless.host)),
			"runs as user 65534"},
		{"seccomp", run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(filtered.host)), "target's seccomp filter blocks mmap (returns EPERM; "},
		{"tracer", run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(traced.host)), "is being traced by process"},
	}
	close(release)
	for _, c := range cases {
		if c.res.code != 1 || !strings.Contains(c.res.stderr, c.want) {
			t.Errorf("%s: exit %d, %q; want exit 1 and %q", c.name, c.res.code, c.res.stderr, c.want)
		} else {
			t.Logf("%s: %s", c.name, strings.TrimSpace(c.res.stderr))
		}
	}
	// Each runs on (the tests' cleanup ends them).
	for _, c := range []*ctr{filtered, sleeper, rootless, traced} {
		if !c.running() || !running(c.host) {
			t.Errorf("%v ended after the refusal: %+v", c.cmd.Args[len(c.cmd.Args)-1], c.res)
		}
	}
}

// containerAttachserver is a container's /tmp holding attachserver, built
// there by the container's gcc against its glibc (2.31: dlopen is in
// libdl, which a program must load for heaplens attach).
func containerAttachserver(t *testing.T, r testenv.Chroot) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "test", "workloads", "attachserver.c"))
	if err != nil {
		t.Fatal(err)
	}
	build := tmpWith(t, "attachserver.c", src, 0o644)
	res := run(t, 2*time.Minute, "unshare", containerArgs(r.Dir, build, "", false, "gcc", "-O2", "-g", "-pthread", "-o", "/tmp/attachserver", "/tmp/attachserver.c", "-Wl,--no-as-needed", "-ldl")...)
	if res.code != 0 {
		t.Fatalf("gcc in the container: exit %d\n%s", res.code, res.stderr)
	}
	return build
}

// TestAttachContainerSeccomp: a C server in a container, under a filter
// like Docker's default profile (which every Docker container gets): from
// the host, heaplens reads the filter, attaches, and finds the leak
// exactly at --rate 1; the server prints and exits as an undisturbed twin,
// and nothing of heaplens's stays in the container.
func TestAttachContainerSeccomp(t *testing.T) {
	t.Parallel() // mostly waiting for its services: beside the other container tests
	r, ok := oldRootContainer(t)
	if !ok {
		return
	}
	build := containerAttachserver(t, r)
	var cs [2]*ctr
	for i, name := range []string{"bare", "attached"} {
		cs[i] = startContainer(t, r, build, filepath.Join(build, name+".log"), "/tmp/attachserver", "12", "docker", "/tmp/"+name+".log")
	}
	bare, tg := cs[0], cs[1]
	if mode := seccompMode(t, tg.host); mode != "2" {
		t.Fatalf("the server runs under seccomp mode %q, want 2 (filters)", mode)
	}
	for i := 0; i < 2; i++ {
		capPath := filepath.Join(t.TempDir(), "seccomp.hlc")
		res := run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(tg.host), "--rate", "1", "--duration", "1s", "-o", capPath, "-q")
		if res.code != 0 {
			t.Fatalf("attach: exit %d\n%s", res.code, res.stderr)
		}
		checkLeakFound(t, capPath, tg.ns, tg.log, 1)
	}
	if left := tg.leftovers(t); len(left) > 0 {
		t.Errorf("after a detach, heaplens left %v in the container", left)
	}
	sameAsBare(t, bare.target, tg.target)
}

// running reports whether pid runs and is not stopped or a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	return err == nil && i > 0 && i+2 < len(b) && strings.IndexByte("RSD", b[i+2]) >= 0
}

// TestAttachContainerTargetExit: a process of a container that exits while
// attached (not the container's first: a shell outlives it) ends the
// session, and nothing of heaplens's stays in the container's /tmp or
// /dev/shm.
func TestAttachContainerTargetExit(t *testing.T) {
	t.Parallel() // mostly waiting for its services: beside the other container tests
	r, ok := oldRootContainer(t)
	if !ok {
		return
	}
	script, err := os.ReadFile(filepath.Join(root, "test", "workloads", "pyserver.py"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := tmpWith(t, "pyserver.py", script, 0o644)
	// dash is the container's sh (and the script's that makes it, which becomes it: one pid).
	sh := startContainer(t, r, tmp, "", "/bin/dash", "-c", "/usr/bin/python3.9 /tmp/pyserver.py 4 /tmp/log; sleep 30")
	var py int
	waitFor(t, "the service to start", func() bool {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sh.host, sh.host))
		py, _ = strconv.Atoi(strings.TrimSpace(string(kids)))
		b, _ := os.ReadFile(filepath.Join(tmp, "log"))
		return py > 0 && len(b) > 0
	})
	capPath := filepath.Join(t.TempDir(), "exit.hlc")
	res := run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(py), "-o", capPath)
	if res.code != 0 || !strings.Contains(res.stderr, "the process ended") {
		t.Fatalf("attach until the process ends: exit %d\n%s", res.code, res.stderr)
	}
	if left := sh.leftovers(t); len(left) > 0 {
		t.Errorf("after the process ended, the container holds %v", left)
	}
	if leaks := report(t, capPath, "leaks"); leaks.site("leak_slowly") <= 0 {
		t.Errorf("the session until the process's end did not see leak_slowly")
	}
}

// TestAttachTimeNamespace: a service in a PID and time namespace whose
// CLOCK_MONOTONIC is a day ahead of heaplens's (as a container restored by
// CRIU has): its session is not taken for orphaned (the heartbeat is
// written in its clock), and the capture's times are all in its clock, so
// that the window is the session's and the leak is found in it.
func TestAttachTimeNamespace(t *testing.T) {
	t.Parallel() // mostly waiting for its services: beside the other container tests
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	tg := startTarget(t, log, "unshare", "--time", "--monotonic", "86400", "--pid", "--fork",
		"/usr/bin/python3", filepath.Join(root, "test", "workloads", "pyserver.py"), "6", log)
	t.Cleanup(func() { tg.cmd.Process.Kill() })
	tg.waitLog(t)
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", tg.pid(), tg.pid()))
	py, err := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil {
		t.Fatalf("unshare's child: %q", kids)
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/timens_offsets", py)); !strings.Contains(string(b), "86400") {
		t.Fatalf("the service's time namespace has no offset: %q", b)
	}
	capPath := filepath.Join(dir, "timens.hlc")
	res := run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(py), "--duration", "3s", "-o", capPath, "-q")
	if res.code != 0 {
		t.Fatalf("attach: exit %d\n%s", res.code, res.stderr)
	}
	from, until := attachWindow(t, capPath, 1)
	if w := time.Duration(until - from); w < 2*time.Second || w > 10*time.Second {
		t.Errorf("the session's window is %v in its capture, for a 3 s session", w)
	}
	checkLeakFound(t, capPath, 1, log, 512<<10)
	if res := tg.wait(t, time.Minute); res.code != 0 {
		t.Errorf("the service after the session: %+v", res)
	}
}
