package cpython

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// `go test` (make test) runs the CI slice; `make test-cpython` passes -full.
var full = flag.Bool("full", false, "also a very low rate, and pyenv's CPython 3.8–3.13")

// The slice, longest first: two runners take modules in this order and
// finish together.
var modules = []string{
	"test_multiprocessing_fork",
	"test_signal",
	"test_subprocess",
	"test_asyncio.test_tasks",
	"test_threading",
	"test_cmd_line",
	"test_weakref",
	"test_sys",
	"test_gc",
}

// known are differences with a known cause, each named by its case and a
// text of its failure under heaplens. They are reported, not failed; a case
// that differs otherwise fails, and so does a known difference that is gone
// (remove it here then).
var known = map[string]struct {
	text, why string
	since     int // the first CPython 3.x whose test sees it
}{
	// heaplens's PyMem allocators sit in front of pymalloc, so CPython, which
	// compares the domains' function pointers with its own, no longer
	// believes pymalloc is in use: sys._debugmallocstats() and
	// PYTHONMALLOCSTATS print no pymalloc statistics, and the allocator's
	// name is unknown (with --no-python all three are as bare).
	"test.test_sys.SysModuleTest.test_debugmallocstats": {"Small block threshold", pymallocHidden, 11},
	"test.test_cmd_line.CmdLineTest.test_pythonmalloc":  {"cannot get allocators name", pymallocHidden, 8},
	"test.test_cmd_line.CmdLineTest.test_xdev":          {"cannot get allocators name", pymallocHidden, 8},
	// PYTHONMALLOCSTATS=1, the statistics printed at exit: a case new in 3.14.
	"test.test_cmd_line.CmdLineTest.test_python_malloc_stats": {"Small block threshold", pymallocHidden, 14},
}

const pymallocHidden = "heaplens's PyMem hooks hide pymalloc from CPython's own checks"

// interpreter is one CPython with its own test suite, and the rates to run
// it at. Besides heaplens's default, a low rate samples often so that the
// sampling paths (unwinding, reading Python frames, moving sampled objects
// out of pymalloc) run all the time; at 256 bytes about one 32-byte object
// in eight is sampled.
type interpreter struct {
	name, python string
	minor        int // 3.minor
	rates        []string
	optional     bool     // a module its installation lacks is said loudly, not failed
	env          []string // for both runs: another allocator preloaded
	root         *testenv.Chroot
	modules      []string // a slice of the slice (CI's time); nil: all of it
}

// newModules is the part of the slice CI runs on 3.14 and 3.15 (in the sid
// root, at the default rate): the collector and finalization, and sys's
// allocator and frame introspection, 100 s for both on a loaded 2-core
// machine (test_weakref would add 150 s); make test-cpython runs the whole
// slice, at 4 KiB too.
var newModules = []string{"test_gc", "test_sys"}

// rootInterpreters are the sid root's 3.14 and 3.15 (testenv.SidRoot), each
// missing one said loudly.
func rootInterpreters(t *testing.T) []interpreter {
	r, ok := testenv.SidRoot(t)
	if !ok {
		return nil
	}
	var all []interpreter
	for _, py := range r.RootPythons(t) {
		in := interpreter{name: py.Name, python: py.Path, minor: py.Minor, rates: []string{"default"}, root: &r, modules: newModules}
		if *full {
			in.rates, in.modules = []string{"default", "4KiB"}, nil
		}
		all = append(all, in)
	}
	return all
}

// jemalloc is Debian's, which scripts/deps.sh installs: many Python services
// preload it, and heaplens must leave them as they are (docs/allocators.md).
const jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

func interpreters(t *testing.T) []interpreter {
	debian := interpreter{name: "debian", python: "/usr/bin/python3", minor: 11, rates: []string{"default", "4KiB"}}
	if !*full {
		t.Logf("CI slice: Debian's python3 at rates %v, the sid root's 3.14 and 3.15 on %v at the default rate; `make test-cpython` adds 256, jemalloc preloaded, pyenv's CPython 3.8–3.13 at 4KiB and all of 3.14's and 3.15's slice at 4KiB too", debian.rates, newModules)
		return append([]interpreter{debian}, rootInterpreters(t)...)
	}
	debian.rates = append(debian.rates, "256")
	all := []interpreter{debian}
	if _, err := os.Stat(jemalloc); err != nil {
		testenv.Missing(t, "%s is missing (scripts/deps.sh installs it): Debian's python3 with jemalloc does NOT run", jemalloc)
	} else {
		all = append(all, interpreter{name: "debian-jemalloc", python: "/usr/bin/python3", minor: 11,
			rates: []string{"default", "4KiB"}, env: []string{"LD_PRELOAD=" + jemalloc}})
	}
	for _, py := range testenv.Pythons(t) {
		if py.Name != "debian-python3" {
			all = append(all, interpreter{name: py.Name, python: py.Path, minor: py.Minor, rates: []string{"4KiB"}, optional: true})
		}
	}
	return append(all, rootInterpreters(t)...)
}

const (
	runTimeout = 15 * time.Minute // one module, one way, on a loaded 2-core machine
	reruns     = 3                // of each differing case, each way
	runners    = 2                // modules at a time: the machine has 2 cores
)

var root = testenv.Root

func heaplensBin(t *testing.T) string { return testenv.Heaplens(t) }

func TestCPythonSlice(t *testing.T) {
	heaplens := heaplensBin(t)
	type job struct {
		name   string
		s      suite
		module string
		rates  []string
	}
	var jobs []job
	ins := interpreters(t)
	for _, m := range modules {
		for _, in := range ins {
			if in.modules != nil && !slices.Contains(in.modules, m) {
				continue
			}
			s := suite{python: in.python, minor: in.minor, heaplens: heaplens, env: in.env, timeout: runTimeout, root: in.root}
			if in.root != nil {
				host, _ := in.root.TempDir(t)
				s.heaplens = in.root.Heaplens(t, host)
			}
			if out, err := s.command(context.Background(), os.TempDir(), in.python, "-c", "import test."+m).CombinedOutput(); err != nil {
				if in.optional {
					testenv.Missing(t, "%s has no test.%s, which does NOT run there: %s", in.python, m, tail(string(out), 1))
					continue
				}
				t.Fatalf("%s (%s) cannot import test.%s: CPython's test suite is missing (Debian: libpython3.X-testsuite, which scripts/deps.sh and make sidroot install): %v\n%s", in.python, in.name, m, err, out)
			}
			jobs = append(jobs, job{in.name + "/" + m, s, m, in.rates})
		}
	}
	// Runners rather than t.Parallel, which starts subtests in no set order.
	queue := make(chan job)
	var wg sync.WaitGroup
	for range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				t.Run(j.name, func(t *testing.T) { compareModule(t, j.s, j.module, j.rates) })
			}
		}()
	}
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	wg.Wait()
}

// compareModule runs a module bare, then under heaplens at each rate, and
// requires the same outcome for every case.
func compareModule(t *testing.T, s suite, module string, rates []string) {
	bare, err := s.regrtest(module, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if bare.cases[wholeRunID] != nil {
		t.Fatalf("bare, %s gave no results (exit %d): nothing to compare with\n%s", strings.Join(bare.argv, " "), bare.code, bare.cases[wholeRunID].text)
	}
	t.Logf("bare: %v, %s", bare.elapsed.Round(100*time.Millisecond), count(bare))
	for _, rate := range rates {
		hl, verdicts, err := s.compare(module, rate, bare)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("heaplens --rate %s: %v (x%.2f), %s", rate, hl.elapsed.Round(100*time.Millisecond),
			hl.elapsed.Seconds()/bare.elapsed.Seconds(), count(hl))
		seen := map[string]bool{}
		for _, v := range verdicts {
			k, isKnown := known[v.id]
			switch {
			case v.flaky:
				t.Logf("FLAKY (flips bare too, accepted): %s", v)
			case isKnown && strings.Contains(v.hlText, k.text):
				seen[v.id] = true
				t.Logf("KNOWN DIFFERENCE under heaplens --rate %s (%s): %s", rate, k.why, v)
			default:
				t.Errorf("DIFFERENT under heaplens --rate %s: %s", rate, v)
			}
		}
		for id, k := range known {
			if c := bare.cases[id]; c != nil && c.outcome != skipped && s.minor >= k.since && !seen[id] {
				t.Errorf("the known difference of %s (%s) is gone under heaplens --rate %s: remove it from known", id, k.why, rate)
			}
		}
	}
}

// compare runs a module under heaplens and judges every case whose outcome
// differs from the bare run.
func (s suite) compare(module, rate string, bare *run) (*run, []verdict, error) {
	hl, err := s.regrtest(module, rate, nil)
	if err != nil {
		return nil, nil, err
	}
	ids := differing(bare, hl)
	if len(ids) == 0 {
		return hl, nil, nil
	}
	return hl, s.judge(module, rate, ids, bare, hl), nil
}

func count(r *run) string {
	if c := r.cases[wholeRunID]; c != nil {
		return c.outcome
	}
	n := map[string]int{}
	for id, c := range r.cases {
		if id != envCaseID {
			n[c.outcome]++
		}
	}
	var parts []string
	for _, o := range []string{ok, fail, errored, skipped, xfail, xpass} {
		if n[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[o], o))
		}
	}
	return fmt.Sprintf("%d cases: %s; environment %s", len(r.cases)-1, strings.Join(parts, ", "), r.cases[envCaseID].outcome)
}

// outcome of a case in a run; a run without results has that for every case.
func outcome(r *run, id string) string {
	if c := r.cases[wholeRunID]; c != nil {
		return c.outcome
	}
	if id == wholeRunID {
		return "results"
	}
	if c := r.cases[id]; c != nil {
		return c.outcome
	}
	return missing
}

// differing lists the cases whose outcomes differ, sorted; a run without
// results differs as a whole.
func differing(a, b *run) []string {
	if (a.cases[wholeRunID] == nil) != (b.cases[wholeRunID] == nil) {
		return []string{wholeRunID}
	}
	var ids []string
	for id := range a.cases {
		if outcome(a, id) != outcome(b, id) {
			ids = append(ids, id)
		}
	}
	for id := range b.cases {
		if a.cases[id] == nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// verdict is one differing case after its reruns.
type verdict struct {
	id        string
	bare, hl  []string // outcomes: the module run, then the reruns
	flaky     bool
	bareText  string // what bare reported in the module run
	hlText    string // what heaplens reported where it differed from bare
	reproduce string // the heaplens run of this case alone
}

func (v verdict) String() string {
	s := fmt.Sprintf("%s\n  bare:     %s\n  heaplens: %s\n  (the module run, then %d reruns of the differing cases alone, or of the module for %s)\n  rerun:    %s",
		v.id, strings.Join(v.bare, ", "), strings.Join(v.hl, ", "), reruns, envCaseID, v.reproduce)
	if v.hlText != "" {
		s += "\n  --- under heaplens:\n" + indent(v.hlText)
	}
	if v.bareText != "" {
		s += "\n  --- bare:\n" + indent(v.bareText)
	}
	return s
}

// judge reruns the differing cases alone, bare and under heaplens side by
// side. A difference is accepted as flakiness only when bare showed every
// outcome heaplens showed: it flips bare too. Anything else is a
// difference, even one heaplens showed once.
func (s suite) judge(module, rate string, ids []string, bare, hl *run) []verdict {
	vs := make([]verdict, len(ids))
	for i, id := range ids {
		vs[i] = verdict{id: id, bare: []string{outcome(bare, id)}, hl: []string{outcome(hl, id)}, reproduce: s.reproduce(module, rate, id)}
		if c := hl.cases[id]; c != nil {
			vs[i].hlText = c.text
		}
		if c := hl.cases[wholeRunID]; c != nil {
			vs[i].hlText = c.text
		}
		if c := bare.cases[id]; c != nil {
			vs[i].bareText = c.text
		}
	}
	for round := 0; round < reruns; round++ {
		var b, h *run
		var errB, errH error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); b, errB = s.regrtest(module, "", ids) }()
		go func() { defer wg.Done(); h, errH = s.regrtest(module, rate, ids) }()
		wg.Wait()
		for i, id := range ids {
			vs[i].bare = append(vs[i].bare, rerunOutcome(b, errB, id))
			vs[i].hl = append(vs[i].hl, rerunOutcome(h, errH, id))
			if h != nil && vs[i].hlText == "" && outcome(h, id) != vs[i].bare[0] {
				if c := h.cases[id]; c != nil {
					vs[i].hlText = c.text
				}
			}
		}
	}
	for i := range vs {
		seen := map[string]bool{}
		for _, o := range vs[i].bare {
			seen[o] = true
		}
		vs[i].flaky = true
		for _, o := range vs[i].hl {
			vs[i].flaky = vs[i].flaky && seen[o]
		}
	}
	return vs
}

// reproduce is the command that runs one case under heaplens by hand.
func (s suite) reproduce(module, rate, id string) string {
	argv := []string{"bin/heaplens", "run"}
	if rate != "default" {
		argv = append(argv, "--rate", rate)
	}
	argv = append(argv, "--", s.python, "-m", "test", module, "-v")
	if s.testdir != "" {
		argv = append(argv, "--testdir", s.testdir)
	}
	for _, p := range matchPatterns([]string{id}) {
		argv = append(argv, "-m", "'"+p+"'")
	}
	return strings.Join(argv, " ")
}

func rerunOutcome(r *run, err error, id string) string {
	if err != nil {
		return "rerun failed: " + err.Error()
	}
	return outcome(r, id)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
