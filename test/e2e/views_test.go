package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/heap"
)

// The burst workload's sites (test/workloads/burst.c).
const (
	burstN, burstSz = 64, 1 << 20
	tempN, tempSz   = 20000, 1024
	keepN, keepSz   = 2000, 4096
	treeBurstN      = 48
	parentN         = 32
	burstRate       = 64 << 10
)

// jsonDoc is the part of docs/json-format.md the tests read.
type jsonDoc struct {
	Schema    string `json:"schema"`
	View      string `json:"view"`
	At        *float64
	HeapAt    *float64 `json:"heap_at"`
	Processes []struct {
		Stream uint32
		PID    int
		Peak   *struct {
			T     float64
			Bytes float64
		}
		End    *float64
		Status string
	}
	Notes []string
	Total struct {
		Bytes     float64
		BytesCI95 float64 `json:"bytes_ci95"`
	}
	Frames []struct {
		Label, Kind string
	}
	Stacks  [][]int
	Samples struct {
		Stream    []uint32
		Thread    []uint32
		Stack     []int
		Bytes     []float64
		BytesCI95 []float64 `json:"bytes_ci95"`
	}
	Timeline struct {
		End      float64
		Total    [][2]float64
		TotalRSS [][2]float64 `json:"total_rss"`
		Peak     struct{ T, Bytes float64 }
		PeakRSS  *struct{ T, Bytes float64 } `json:"peak_rss"`
	}
}

func reportJSON(t *testing.T, capPath string, args ...string) jsonDoc {
	t.Helper()
	res := run(t, 2*time.Minute, heaplensBin(t), append([]string{"report", capPath, "--format", "json"}, args...)...)
	if res.code != 0 {
		t.Fatalf("report json %v: exit %d\n%s", args, res.code, res.stderr)
	}
	var d jsonDoc
	if err := json.Unmarshal([]byte(res.stdout), &d); err != nil {
		t.Fatalf("report json: %v", err)
	}
	return d
}

// near fails unless got is within 4σ of count blocks of size at rate.
func near(t *testing.T, what string, got float64, count int, size uint64) {
	t.Helper()
	want := float64(count) * float64(size)
	sd := heap.Stddev(map[uint64]int{size: count}, burstRate)
	if math.Abs(got-want) > 4*sd+1 {
		t.Errorf("%s: %.0f bytes, want %.0f ± %.0f (4σ)", what, got, want, 4*sd)
	} else {
		t.Logf("%s: %.0f bytes, exact %.0f (σ %.2f%%)", what, got, want, 100*sd/want)
	}
}

var burstCapture = struct {
	path string
	res  result
}{}

// profileBurst profiles burst.c once per test binary run.
func profileBurst(t *testing.T) string {
	t.Helper()
	if burstCapture.path != "" {
		return burstCapture.path
	}
	dir, err := os.MkdirTemp("", "heaplens-burst-")
	if err != nil {
		t.Fatal(err)
	}
	bin := build(t, dir, "burst.c")
	capPath, res := profile(t, dir, []string{"--rate", "64KiB", "--seed", "5"}, bin)
	if res.code != 0 {
		t.Fatalf("heaplens run: exit %d\n%s", res.code, res.stderr)
	}
	burstCapture.path, burstCapture.res = capPath, res
	return capPath
}

func TestViewsOnBurst(t *testing.T) {
	capPath := profileBurst(t)
	peak := reportWith(t, capPath, "--view", "peak")
	near(t, "burst at peak", peak.site("burst"), burstN, burstSz)
	if v := peak.site("hold") + peak.site("churn_temp"); v != 0 {
		t.Errorf("hold and churn_temp come after the burst but the peak shows %.0f bytes of them", v)
	}
	leaks := reportWith(t, capPath, "--view", "leaks")
	near(t, "hold leaked", leaks.site("hold"), keepN, keepSz)
	if v := leaks.site("burst"); v != 0 {
		t.Errorf("burst is freed but leaks shows %.0f bytes", v)
	}
	temp := reportWith(t, capPath, "--view", "temporary")
	near(t, "churn_temp temporary", temp.site("churn_temp"), tempN, tempSz)
	if v := temp.site("burst") + temp.site("hold"); v != 0 {
		t.Errorf("burst lives 300 ms and hold to exit, but temporary (10 ms) shows %.0f bytes of them", v)
	}
	if v := reportWith(t, capPath, "--view", "temporary", "--lifetime", "1s").site("burst"); v == 0 {
		t.Errorf("with --lifetime 1s the 300 ms burst is temporary, but the view shows none")
	}
	allocs := reportWith(t, capPath, "--view", "allocs")
	near(t, "burst allocated", allocs.site("burst"), burstN, burstSz)
	near(t, "churn_temp allocated", allocs.site("churn_temp"), tempN, tempSz)

	// JSON: the timeline's peak is the peak view's moment, RSS was sampled,
	// and the live set 100 ms after the peak (the burst is held 300 ms) is
	// still the burst, while at the end it is the kept set.
	d := reportJSON(t, capPath, "--view", "peak")
	if d.Schema != "heaplens-profile/1" || d.View != "peak" || d.At == nil || d.HeapAt == nil {
		t.Fatalf("json header: %+v", d)
	}
	near(t, "json peak heap", d.Timeline.Peak.Bytes, burstN, burstSz)
	if math.Abs(*d.At-d.Timeline.Peak.T) > 1e-6 {
		t.Errorf("peak view at %.6f s, timeline peak at %.6f s", *d.At, d.Timeline.Peak.T)
	}
	if d.Timeline.PeakRSS == nil || d.Timeline.PeakRSS.Bytes < 60*(1<<20) || len(d.Timeline.TotalRSS) < 3 {
		t.Errorf("RSS: peak %+v from %d samples; the burst touches 64 MiB", d.Timeline.PeakRSS, len(d.Timeline.TotalRSS))
	} else {
		t.Logf("RSS peak %.1f MiB at %.3f s (%d samples); heap peak at %.3f s", d.Timeline.PeakRSS.Bytes/(1<<20), d.Timeline.PeakRSS.T, len(d.Timeline.TotalRSS), d.Timeline.Peak.T)
	}
	at := strconv.FormatFloat(d.Timeline.Peak.T+0.1, 'f', 3, 64) + "s"
	near(t, "burst live 100ms after the peak", reportWith(t, capPath, "--view", "live", "--at", at).site("burst"), burstN, burstSz)
	// Live just before the process's end, hold's blocks are there; after
	// it, nothing of the process counts.
	if e := d.Processes[0].End; e == nil {
		t.Errorf("process has no end time")
	} else {
		before := strconv.FormatFloat(*e-1e-6, 'f', 6, 64) + "s"
		near(t, "hold live just before the end", reportWith(t, capPath, "--view", "live", "--at", before).site("hold"), keepN, keepSz)
		after := strconv.FormatFloat(*e+1, 'f', 3, 64) + "s"
		if f := reportWith(t, capPath, "--view", "live", "--at", after); f.total() != 0 {
			t.Errorf("live after the process ended: %v", f)
		}
	}

	// Filters.
	pid := strconv.Itoa(d.Processes[0].PID)
	if f := reportWith(t, capPath, "--view", "leaks", "--focus", "^hold "); f.total() != f.site("hold") || f.site("hold") == 0 {
		t.Errorf("--focus hold keeps other stacks: %v", f)
	}
	if f := reportWith(t, capPath, "--view", "peak", "--hide", "^burst"); f.site("burst") != 0 || math.Abs(f.total()-peak.total()) > 1 {
		t.Errorf("--hide burst: burst frames remain or bytes changed (%.0f vs %.0f)", f.total(), peak.total())
	}
	if f := reportWith(t, capPath, "--view", "peak", "--pid", pid); math.Abs(f.total()-peak.total()) > 1 {
		t.Errorf("--pid %s (the only process): %.0f bytes, want %.0f", pid, f.total(), peak.total())
	}
	if f := reportWith(t, capPath, "--view", "peak", "--thread", pid); math.Abs(f.total()-peak.total()) > 1 {
		t.Errorf("--thread %s (the main thread): %.0f bytes, want %.0f", pid, f.total(), peak.total())
	}
	if f := reportWith(t, capPath, "--view", "peak", "--thread", "1"); f.total() != 0 {
		t.Errorf("--thread 1 (no such thread): %.0f bytes", f.total())
	}
	if r := run(t, time.Minute, heaplensBin(t), "report", capPath, "--pid", "1"); r.code == 0 {
		t.Errorf("--pid of a process not in the capture succeeded")
	}
	if r := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks", "--min-age", "1h", "--format", "folded"); r.code != 0 || r.stdout != "" {
		t.Errorf("--min-age 1h: exit %d, output %q; nothing is that old", r.code, r.stdout)
	}
	if f := reportWith(t, capPath, "--view", "leaks", "--min-age", "100ms"); f.site("hold") == 0 {
		t.Errorf("--min-age 100ms: hold is 250 ms old at exit but not reported")
	}
	tl := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "timeline")
	if tl.code != 0 || !strings.Contains(tl.stdout, "peak:") || !strings.Contains(tl.stdout, "peak RSS:") {
		t.Errorf("timeline text: exit %d\n%s", tl.code, tl.stdout)
	}
}

func TestSpeedscopeOnBurst(t *testing.T) {
	capPath := profileBurst(t)
	res := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "peak", "--format", "speedscope")
	var s struct {
		Schema string `json:"$schema"`
		Shared struct {
			Frames []struct{ Name string }
		}
		Profiles []struct {
			Type, Unit string
			EndValue   float64
			Samples    [][]int
			Weights    []float64
		}
	}
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("speedscope: %v\n%.300s", err, res.stdout)
	}
	if !strings.Contains(s.Schema, "speedscope") || len(s.Profiles) != 1 || s.Profiles[0].Type != "sampled" || s.Profiles[0].Unit != "bytes" {
		t.Fatalf("speedscope shape: %+v", s)
	}
	p := s.Profiles[0]
	var sum float64
	for i, w := range p.Weights {
		sum += w
		leaf := s.Shared.Frames[p.Samples[i][len(p.Samples[i])-1]].Name
		if !strings.HasPrefix(leaf, "burst (") {
			t.Errorf("peak sample's leaf is %q, want burst", leaf)
		}
	}
	near(t, "speedscope weights", sum, burstN, burstSz)
}

// TestPProfOnBurst checks our pprof with go tool pprof itself.
func TestPProfOnBurst(t *testing.T) {
	capPath := profileBurst(t)
	out := filepath.Join(t.TempDir(), "peak.pb.gz")
	if r := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "peak", "--format", "pprof", "-o", out); r.code != 0 {
		t.Fatalf("pprof: exit %d: %s", r.code, r.stderr)
	}
	gotool := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"tool", "pprof"}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	top := gotool("-top", "-unit=B", out)
	if !strings.Contains(top, "Type: inuse_space") || !strings.Contains(top, "burst") {
		t.Errorf("go tool pprof -top:\n%s", top)
	}
	// -raw lists the sample types and values exactly.
	raw := gotool("-raw", out)
	for _, want := range []string{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count", "inuse_space/bytes", "PeriodType: space bytes", "Period: 65536"} {
		if !strings.Contains(raw, want) {
			t.Errorf("go tool pprof -raw lacks %q:\n%.2000s", want, raw)
		}
	}
	traces := gotool("-traces", "-sample_index=alloc_space", out)
	for _, want := range []string{"pid:", "thread_id:", "churn_temp", "hold", "burst", "main"} {
		if !strings.Contains(traces, want) {
			t.Errorf("go tool pprof -traces lacks %q:\n%.3000s", want, traces)
		}
	}
	// The in-use value of the burst stack, in bytes, against the sampling tolerance.
	inuse := gotool("-top", "-unit=B", "-sample_index=inuse_space", "-focus=^burst$", out)
	for _, line := range strings.Split(inuse, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[5] == "burst" {
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "B"), 64)
			if err != nil {
				t.Fatalf("parsing %q: %v", line, err)
			}
			near(t, "pprof inuse_space of burst", v, burstN, burstSz)
		}
	}
	allocsOut := filepath.Join(t.TempDir(), "allocs.pb.gz")
	run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "allocs", "--format", "pprof", "-o", allocsOut)
	if top := gotool("-top", allocsOut); !strings.Contains(top, "Type: alloc_space") {
		t.Errorf("allocs view opens as:\n%s", top)
	}
	// Go's heap profile at exit: alloc_space is everything allocated,
	// inuse_space what was still live at the end. burst's blocks were all
	// freed; hold's were all kept.
	f, err := os.Open(allocsOut)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := pprofile.Parse(f)
	if err != nil {
		t.Fatalf("parsing the allocs profile: %v", err)
	}
	allocBy, inuseBy := map[string]float64{}, map[string]float64{}
	for _, s := range p.Sample {
		if ln := s.Location[0].Line; len(ln) > 0 {
			allocBy[ln[0].Function.Name] += float64(s.Value[1])
			inuseBy[ln[0].Function.Name] += float64(s.Value[3])
		}
	}
	near(t, "pprof allocs: alloc_space of burst", allocBy["burst"], burstN, burstSz)
	near(t, "pprof allocs: alloc_space of hold", allocBy["hold"], keepN, keepSz)
	near(t, "pprof allocs: inuse_space of hold", inuseBy["hold"], keepN, keepSz)
	if inuseBy["burst"] != 0 || inuseBy["churn_temp"] != 0 {
		t.Errorf("pprof allocs: burst and churn_temp were freed, but inuse_space shows %.0f and %.0f", inuseBy["burst"], inuseBy["churn_temp"])
	}
}

// TestTreePeak: the peak of a process tree is the peak of the sum over
// time: the child's 48 MiB burst ends before the parent holds 32 MiB, so
// the tree's peak is 48 MiB, not 80.
func TestTreePeak(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "burst.c")
	capPath, res := profile(t, dir, []string{"-q", "--rate", "64KiB", "--seed", "9"}, bin, "tree")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	d := reportJSON(t, capPath, "--view", "peak")
	if len(d.Processes) != 2 {
		t.Fatalf("%d processes, want parent and child", len(d.Processes))
	}
	near(t, "tree peak", d.Timeline.Peak.Bytes, treeBurstN, burstSz)
	tree := reportWith(t, capPath, "--view", "peak")
	near(t, "burst at the tree's peak", tree.site("burst"), treeBurstN, burstSz)
	if v := tree.site("parent_hold"); v != 0 {
		t.Errorf("parent_hold is not live at the tree's peak but shows %.0f bytes", v)
	}
	for _, p := range d.Processes {
		f := reportWith(t, capPath, "--view", "peak", "--pid", strconv.Itoa(p.PID))
		if f.site("parent_hold") > 0 {
			near(t, "parent's own peak", f.site("parent_hold"), parentN, burstSz)
		} else {
			near(t, "child's own peak", f.site("burst"), treeBurstN, burstSz)
		}
	}
}

func TestRunSummary(t *testing.T) {
	profileBurst(t)
	s := burstCapture.res.stderr
	for _, want := range []string{"peak ", "estimated heap at", "RSS peak", "top sites at peak:", "burst (burst.c:", "top leak suspects", "hold (burst.c:", "dropped: 0", "--format html", "heaplens serve"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b[") {
		t.Errorf("summary has terminal escapes though stderr is not a TTY:\n%q", s)
	}
}

// TestTreeEnds: a process's blocks stop counting toward the tree when it
// exits. Each child holds 50 MiB until it exits without freeing; run one
// after the other the tree never holds more than one child's 50 MiB, run
// together it holds both. leaks still shows every child's block, live at
// its exit.
func TestTreeEnds(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "hold.c")
	const mib = 1 << 20
	tests := []struct {
		name   string
		script string
		peak   float64
	}{
		{"sequential", bin + " 50 200; sleep 0.3; " + bin + " 50 200", 50 * mib},
		{"overlapping", bin + " 50 800 & sleep 0.2; " + bin + " 50 800; wait", 100 * mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capPath := filepath.Join(t.TempDir(), "tree.hlc")
			// 50 MiB in one block at a 512 KiB rate is sampled with probability
			// 1 - e^-100 and weighs 1: the estimate is exact.
			res := run(t, 2*time.Minute, heaplensBin(t), "run", "-q", "-o", capPath, "--seed", "3", "--", "sh", "-c", tt.script)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			d := reportJSON(t, capPath, "--view", "peak")
			// The shell's own few KiB may add to the peak.
			if got := d.Timeline.Peak.Bytes; got < tt.peak || got > tt.peak+mib {
				t.Errorf("tree peak %.1f MiB, want %.0f MiB", got/mib, tt.peak/mib)
			}
			if got := reportWith(t, capPath, "--view", "peak").site("hold_block"); got != tt.peak {
				t.Errorf("hold_block at the peak: %.1f MiB, want %.0f MiB", got/mib, tt.peak/mib)
			}
			if got := reportWith(t, capPath, "--view", "leaks").site("hold_block"); got != 100*mib {
				t.Errorf("hold_block in leaks: %.1f MiB, want both children's 100 MiB", got/mib)
			}
		})
	}
}

// report -o naming the capture itself (by any path) is refused before
// anything is written.
func TestReportRefusesToOverwriteCapture(t *testing.T) {
	capPath := profileBurst(t)
	before, err := os.ReadFile(capPath)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "alias.hlc")
	if err := os.Symlink(capPath, link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{capPath, link} {
		res := run(t, time.Minute, heaplensBin(t), "report", capPath, "--format", "json", "-o", out)
		if res.code != 2 || !strings.Contains(res.stderr, "would overwrite the capture") {
			t.Errorf("-o %s: exit %d, stderr %q", out, res.code, res.stderr)
		}
	}
	if after, _ := os.ReadFile(capPath); !bytes.Equal(before, after) {
		t.Errorf("the capture changed")
	}
}

// The ± each report row states is a 95 % interval that covers the exact
// bytes of a site in about 95 % of runs: leaky's two leaking sites (exact
// sizes printed by the workload) over 20 seeds at the default rate. For a
// true 95 % interval, 40 checks miss 8 or more times with probability
// under 0.4 %.
func TestStatedIntervalsCoverExactBytes(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "leaky.c")
	const seeds = 20
	covered, checks := 0, 0
	for seed := 1; seed <= seeds; seed++ {
		capPath := filepath.Join(dir, fmt.Sprintf("leaky%d.hlc", seed))
		res := run(t, 2*time.Minute, heaplensBin(t), "run", "-q", "--seed", strconv.Itoa(seed), "-o", capPath, "--", bin)
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		exact := map[string]float64{}
		for _, line := range strings.Split(res.stdout, "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				exact[f[0]], _ = strconv.ParseFloat(f[1], 64)
			}
		}
		d := reportJSON(t, capPath, "--view", "leaks")
		for _, fn := range []string{"keep_small", "keep_large"} {
			var est, variance float64
			for i, si := range d.Samples.Stack {
				for _, f := range d.Stacks[si] {
					if strings.HasPrefix(d.Frames[f].Label, fn+" (") {
						est += d.Samples.Bytes[i]
						variance += math.Pow(d.Samples.BytesCI95[i]/1.96, 2)
						break
					}
				}
			}
			ci := 1.96 * math.Sqrt(variance)
			checks++
			if math.Abs(est-exact[fn]) <= ci {
				covered++
			} else {
				t.Logf("seed %d: %s %.0f ± %.0f, exact %.0f", seed, fn, est, ci, exact[fn])
			}
		}
	}
	t.Logf("the stated 95 %% intervals covered the exact bytes in %d of %d checks", covered, checks)
	if checks-covered >= 8 {
		t.Errorf("intervals covered the truth in only %d of %d checks", covered, checks)
	}
}
