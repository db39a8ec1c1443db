package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
	"github.com/heaplens/heaplens/test/testenv"
)

// poolShare is how the bytes pool workers allocated in one run were charged.
type poolShare struct {
	worker   float64            // estimated bytes allocated on pool workers
	right    float64            // charged to the function that asked for the work
	wrong    float64            // charged to another Python function
	none     float64            // unattributed
	byMethod map[string]float64 // worker bytes by method
	// started is what workers allocated with no pool work to charge it to
	// (their start-up buffers: OpenBLAS maps one per thread), charged to the
	// code that created the thread; not in worker. startedOff counts those
	// whose creator's stack holds no Python frame.
	started, startedOff float64
}

func (s poolShare) pct(x float64) float64 {
	if s.worker == 0 {
		return 0
	}
	return 100 * x / s.worker
}

// measurePools sorts the estimated bytes of every pool-worker allocation by
// whether its stitched stack holds the right owner. With one Python thread
// the owner is owners[0]; with two, either owner counts as right (which of
// the two asked is known only to the exact methods, by construction).
func measurePools(c *capture.Capture, owners ...string) poolShare {
	s := poolShare{byMethod: map[string]float64{}}
	for _, a := range c.Allocs {
		method := stack.Method(c, a.StackID)
		if method == capture.MethodSelf {
			continue
		}
		w := float64(a.Size) * heap.Weight(a.Size, c.Meta.Rate)
		if method == capture.MethodCreator {
			s.started += w
			if !slices.ContainsFunc(export.StackFrames(c, a.StackID), func(f string) bool { return strings.Contains(f, ".py:") }) {
				s.startedOff += w
			}
			continue
		}
		s.worker += w
		s.byMethod[capture.MethodNames[method]] += w
		if method == capture.MethodUnattributed {
			s.none += w
			continue
		}
		owner := false
		for _, f := range export.StackFrames(c, a.StackID) {
			for _, o := range owners {
				owner = owner || strings.HasPrefix(f, o+" (")
			}
		}
		if owner {
			s.right += w
		} else {
			s.wrong += w
		}
	}
	return s
}

// Real libraries from Debian handing work to their pools, measured against
// the workloads' known structure: each Python thread calls its library from
// a function named for it. Exact methods must never charge a wrong owner;
// the table is what docs/pool-attribution.md reports.
func TestRealLibraryPools(t *testing.T) {
	// Debian's numpy, scikit-learn, numexpr and torch live there.
	realPools(t, "/usr/bin/python3", onHost, "", map[string]string{"blas": "numpy", "blas-openmp": "numpy", "sklearn": "sklearn", "numexpr": "numexpr", "torch": "torch"})
}

// TestRealLibraryPoolsNew is TestRealLibraryPools on 3.14 and 3.15 in the
// sid root, with what Debian builds for them there and whose workers
// allocate: scikit-learn's OpenMP pool and numexpr's own (numpy's BLAS
// workers allocate nothing, and sid has no torch).
func TestRealLibraryPoolsNew(t *testing.T) {
	for _, py := range rootPythons(t) {
		t.Run(py.name, func(t *testing.T) {
			realPools(t, py.path, py.where, py.root.Dir, map[string]string{"sklearn": "sklearn", "numexpr": "numexpr"})
		})
	}
}

// realPools runs each library of probe (by the module it needs) from one
// Python thread and from two, with py where at says (rootDir: the root's
// host path, "" for the host), and checks and tabulates the attribution.
func realPools(t *testing.T, py string, at func(t *testing.T) where, rootDir string, probe map[string]string) {
	openmpBLAS := "/usr/lib/x86_64-linux-gnu/openblas-openmp"
	type row struct {
		name string
		s    poolShare
	}
	var (
		mu   sync.Mutex
		rows []row
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 2)
	for lib, mod := range probe {
		if res := at(t).run(t, time.Minute, nil, py, "-c", "import "+mod); res.code != 0 {
			testenv.Missing(t, "%s cannot import %s (scripts/deps.sh and make sidroot install Debian's package): the %s pool case does NOT run: %s", py, mod, lib, res.stderr)
			continue
		}
		env := []string{"OMP_NUM_THREADS=4", "OPENBLAS_NUM_THREADS=4"}
		script := lib
		if lib == "blas-openmp" {
			if _, err := os.Stat(filepath.Join(rootDir, openmpBLAS, "libopenblas.so.0")); err != nil {
				testenv.Missing(t, "%s (Debian's libopenblas0-openmp): the OpenMP BLAS case does NOT run", openmpBLAS)
				continue
			}
			env = append(env, "LD_LIBRARY_PATH="+openmpBLAS)
			script = "blas"
		}
		for _, mode := range []string{"one", "two"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				w := at(t)
				capPath, capArg := w.file("run.hlc")
				res := w.heaplens(t, 5*time.Minute, env, "run", "-q", "--rate", "4KiB", "--seed", "7", "-o", capArg, "--",
					py, w.workload(t, "realpools.py"), script, mode)
				if res.code != 0 {
					t.Errorf("%s %s: exit %d\n%s", lib, mode, res.code, res.stderr)
					return
				}
				owners := []string{script + "_a"}
				if mode == "two" {
					owners = append(owners, script+"_b")
				}
				s := measurePools(load(t, capPath), owners...)
				mu.Lock()
				rows = append(rows, row{lib + " " + mode, s})
				mu.Unlock()
				if s.startedOff > 0 {
					t.Errorf("%s %s: %.0f bytes charged to a thread's creator whose stack holds no Python frame", lib, mode, s.startedOff)
				}
				exact := s.byMethod["openmp"] + s.byMethod["api"]
				if s.wrong > 0 && exact == s.worker {
					t.Errorf("%s %s: exact methods charged %.0f bytes to a wrong owner", lib, mode, s.wrong)
				}
				// One Python thread: nothing may go to a wrong owner. The fallback
				// (numexpr) misses the bytes a worker makes before its caller
				// reaches its condition wait, a share that varies from run to
				// run: they are unattributed, never misplaced.
				want := 99.0
				if lib == "numexpr" {
					want = 1 // measured 47–100 % over runs: see docs/pool-attribution.md
				}
				switch {
				case lib == "sklearn" && s.pct(s.byMethod["openmp"]) < 99:
					t.Errorf("%s %s: only %.1f%% of %.0f worker bytes came through OpenMP", lib, mode, s.pct(s.byMethod["openmp"]), s.worker)
				case mode == "one" && s.wrong > 0:
					t.Errorf("%s one thread: %.0f worker bytes charged to another function", lib, s.wrong)
				case mode == "one" && s.worker > 0 && s.pct(s.right) < want:
					t.Errorf("%s one thread: only %.1f%% of %.0f worker bytes charged to %s", lib, s.pct(s.right), s.worker, owners[0])
				}
			}()
		}
	}
	wg.Wait()
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	var b strings.Builder
	fmt.Fprintf(&b, "\n| workload | worker bytes (est.) | right owner | wrong owner | unattributed | by method | at thread start (creator) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		var ms []string
		for m, v := range r.s.byMethod {
			ms = append(ms, fmt.Sprintf("%s %.1f%%", m, r.s.pct(v)))
		}
		sort.Strings(ms)
		fmt.Fprintf(&b, "| %s | %.0f | %.1f%% | %.1f%% | %.1f%% | %s | %.0f |\n", r.name, r.s.worker,
			r.s.pct(r.s.right), r.s.pct(r.s.wrong), r.s.pct(r.s.none), strings.Join(ms, ", "), r.s.started)
	}
	t.Log(b.String())
}
