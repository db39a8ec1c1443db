package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/test/testenv"
)

// buildShared compiles a workload from test/workloads into a shared library.
func buildShared(t *testing.T, dir, cc, src, name string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	args := append([]string{"-O2", "-g", "-fPIC", "-shared", "-pthread", "-o", out, filepath.Join(root, "test", "workloads", src)}, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, b)
	}
	return out
}

// poolBytes is what a capture holds for allocations of one size.
type poolBytes struct {
	bytes    map[string]uint64 // by the job function charged ("" = none of them)
	byMethod map[string]uint64
	stacks   []string // an example stack per (function, method), for messages
}

// chargedTo sorts every allocation of exactly size bytes by the job function
// its (stitched) stack holds, among jobs, and by its method.
func chargedTo(c *capture.Capture, size uint64, jobs ...string) poolBytes {
	pb := poolBytes{bytes: map[string]uint64{}, byMethod: map[string]uint64{}}
	seen := map[string]bool{}
	for _, a := range c.Allocs {
		if a.Size != size {
			continue
		}
		frames := export.StackFrames(c, a.StackID)
		owner := ""
		for _, j := range jobs {
			for _, f := range frames {
				if strings.HasPrefix(f, j+" (") {
					owner += j
				}
			}
		}
		method := capture.MethodNames[a.Method]
		pb.bytes[owner] += a.Size
		pb.byMethod[method] += a.Size
		if k := owner + "/" + method; !seen[k] {
			seen[k] = true
			pb.stacks = append(pb.stacks, fmt.Sprintf("%s via %s: %s", owner, method, strings.Join(frames, " <- ")))
		}
	}
	sort.Strings(pb.stacks)
	return pb
}

func (pb poolBytes) String() string {
	return fmt.Sprintf("by function %v, by method %v\n  %s", pb.bytes, pb.byMethod, strings.Join(pb.stacks, "\n  "))
}

// expectCharged checks that all want bytes of size went to job, and that
// workers' share (at least one block) came through method with frame marker.
func expectCharged(t *testing.T, what string, c *capture.Capture, size, want uint64, job, method, marker string, jobs ...string) {
	t.Helper()
	pb := chargedTo(c, size, jobs...)
	if pb.bytes[job] != want || len(pb.bytes) != 1 {
		t.Errorf("%s: %d-byte blocks: want all %d bytes charged to %s, got %s", what, size, want, job, pb)
	}
	if pb.byMethod[method] < size {
		t.Errorf("%s: %d-byte blocks: no worker bytes attributed via %s: %s", what, size, method, pb)
	}
	for _, s := range pb.stacks {
		if strings.Contains(s, "via "+method) && !strings.Contains(s, marker) {
			t.Errorf("%s: a stitched stack lacks %q: %s", what, marker, s)
		}
	}
}

// OpenMP regions called through ctypes from named Python functions: every
// byte the team allocates is charged to that function, whether the runtime
// is libgomp (GOMP_parallel wrapped) or LLVM libomp (OMPT), from one Python
// thread and from two at once with distinct sizes.
func TestOpenMPOrigins(t *testing.T) {
	dir := t.TempDir()
	libs := map[string]string{"gcc-libgomp": buildShared(t, dir, "gcc", "ompwork.c", "libompwork_gcc.so", "-fopenmp")}
	runtimes := map[string]string{"gcc-libgomp": "[pool: libgomp (openmp)]"}
	if _, err := exec.LookPath("clang"); err != nil {
		testenv.Missing(t, "clang (Debian packages clang and libomp-dev; scripts/deps.sh installs them): the libomp/OMPT case does NOT run")
	} else {
		libs["clang-libomp"] = buildShared(t, dir, "clang", "ompwork.c", "libompwork_clang.so", "-fopenmp=libomp")
		runtimes["clang-libomp"] = "[pool: libomp (openmp)]"
	}
	const n, reps = 48, 2
	var wg sync.WaitGroup
	for _, py := range everyPython(t) {
		for build, hostLib := range libs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				what := py.name + "/" + build
				w := py.where(t)
				script, lib := w.workload(t, "pools.py"), w.copy(t, hostLib)
				capOne, res := w.profile(t, []string{"-q", "--rate", "1"}, py.path, script, lib, "omp-one", fmt.Sprint(n), "40000", fmt.Sprint(reps))
				if res.code != 0 {
					t.Errorf("%s one: exit %d\n%s", what, res.code, res.stderr)
					return
				}
				expectCharged(t, what+" one thread", load(t, capOne), 40000, n*reps*40000, "omp_job_a", "openmp", runtimes[build], "omp_job_a")
				capTwo, res := w.profile(t, []string{"-q", "--rate", "1"}, py.path, script, lib, "omp-two", fmt.Sprint(n), "40000", "56000", fmt.Sprint(reps))
				if res.code != 0 {
					t.Errorf("%s two: exit %d\n%s", what, res.code, res.stderr)
					return
				}
				c := load(t, capTwo)
				expectCharged(t, what+" two threads, A", c, 40000, n*reps*40000, "omp_job_a", "openmp", runtimes[build], "omp_job_a", "omp_job_b")
				expectCharged(t, what+" two threads, B", c, 56000, n*reps*56000, "omp_job_b", "openmp", runtimes[build], "omp_job_a", "omp_job_b")
			}()
		}
	}
	wg.Wait()
}

// A persistent pthread pool of the BLAS-server kind: with the pool API the
// workers' bytes are charged exactly, from one Python thread and from two;
// without it the fallback charges them to the one Python thread waiting,
// and reports them unattributed when two wait at once.
func TestPthreadPoolAPIAndFallback(t *testing.T) {
	hostLib := buildShared(t, t.TempDir(), "gcc", "hlpool.c", "libhlpool.so", "-ldl")
	const n = 60
	var wg sync.WaitGroup
	for _, py := range everyPython(t) {
		name := py.name
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := py.where(t)
			script, lib := w.workload(t, "pools.py"), w.copy(t, hostLib)
			run := func(args ...string) *capture.Capture {
				capPath, res := w.profile(t, []string{"-q", "--rate", "1"}, append([]string{py.path, script, lib}, args...)...)
				if res.code != 0 {
					t.Errorf("%s %v: exit %d\n%s", name, args, res.code, res.stderr)
					return nil
				}
				return load(t, capPath)
			}
			if c := run("pool-one", fmt.Sprint(n), "24000", "1"); c != nil {
				expectCharged(t, name+" api, one thread", c, 24000, n*24000, "pool_job_a", "api", "[pool: libhlpool (api)]", "pool_job_a")
			}
			if c := run("pool-two", fmt.Sprint(n), "24000", "33000", "1"); c != nil {
				expectCharged(t, name+" api, two threads, A", c, 24000, n*24000, "pool_job_a", "api", "[pool: libhlpool (api)]", "pool_job_a", "pool_job_b")
				expectCharged(t, name+" api, two threads, B", c, 33000, n*33000, "pool_job_b", "api", "[pool: libhlpool (api)]", "pool_job_a", "pool_job_b")
			}
			if c := run("pool-one", fmt.Sprint(n), "24000", "0"); c != nil {
				expectCharged(t, name+" fallback, one thread", c, 24000, n*24000, "pool_job_a", "fallback", "[pool: libhlpool (fallback)]", "pool_job_a")
			}
			if c := run("pool-two", fmt.Sprint(n), "24000", "33000", "0"); c != nil {
				for _, size := range []uint64{24000, 33000} {
					pb := chargedTo(c, size, "pool_job_a", "pool_job_b")
					if pb.bytes[""] != n*size || pb.byMethod["unattributed"] != n*size {
						t.Errorf("%s fallback, two threads: %d-byte blocks: want all %d bytes unattributed, got %s", name, size, n*size, pb)
					}
					for _, s := range pb.stacks {
						if !strings.Contains(s, "<unattributed: libhlpool worker>") {
							t.Errorf("%s fallback, two threads: stack lacks <unattributed: libhlpool worker>: %s", name, s)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
}

// Two extensions each linked against its own libgomp copy (as wheels bundle
// renamed copies): every region is forwarded to the copy the caller's
// reference would bind to without heaplens, so omp_get_thread_num() inside
// the region still sees its team (the workload asserts that workers ran
// iterations) and the bytes are charged to the right function. Loaded
// RTLD_LOCAL, each library uses its own copy; with the first one's copy in
// the global scope, both bind to it. The mechanism does not depend on the
// interpreter, so one Python is enough here.
func TestOpenMPLibgompCopies(t *testing.T) {
	if _, err := exec.LookPath("patchelf"); err != nil {
		testenv.Missing(t, "patchelf (Debian package; scripts/deps.sh installs it): cannot make a second libgomp copy")
		return
	}
	dir := t.TempDir()
	sys := buildShared(t, dir, "gcc", "ompwork.c", "libompwork_gcc.so", "-fopenmp")
	out, err := exec.Command("gcc", "-print-file-name=libgomp.so.1").Output()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "libgomp-hl.so.1")
	for _, cmd := range [][]string{
		{"cp", "-L", strings.TrimSpace(string(out)), copyPath},
		{"patchelf", "--set-soname", "libgomp-hl.so.1", copyPath},
		{"gcc", "-O2", "-g", "-fPIC", "-fopenmp", "-c", "-o", filepath.Join(dir, "ow.o"), filepath.Join(root, "test", "workloads", "ompwork.c")},
		{"gcc", "-shared", "-o", filepath.Join(dir, "libompwork_copy.so"), filepath.Join(dir, "ow.o"), "-L" + dir, "-l:libgomp-hl.so.1", "-Wl,-rpath," + dir},
	} {
		if b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, b)
		}
	}
	script := filepath.Join(root, "test", "workloads", "pools.py")
	for _, mode := range []string{"omp-copies", "omp-copies-global"} {
		capPath, res := profile(t, t.TempDir(), []string{"-q", "--rate", "1"}, "/usr/bin/python3", script, sys, mode,
			filepath.Join(dir, "libompwork_copy.so"), "32", "40000", "56000", "2")
		if res.code != 0 {
			t.Fatalf("%s: exit %d\n%s", mode, res.code, res.stderr)
		}
		c := load(t, capPath)
		expectCharged(t, mode+", system libgomp", c, 40000, 32*2*40000, "omp_job_a", "openmp", "[pool: libgomp (openmp)]", "omp_job_a", "omp_job_b")
		wantCopy := "[pool: libgomp-hl (openmp)]"
		if mode == "omp-copies-global" {
			wantCopy = "[pool: libgomp (openmp)]"
		}
		expectCharged(t, mode+", copy", c, 56000, 32*2*56000, "omp_job_b", "openmp", wantCopy, "omp_job_a", "omp_job_b")
	}
}
