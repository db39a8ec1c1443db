package compare

// These tests cover the harness's pure logic: parsing, statistics, the
// synthetic capture. Nothing here times anything: speed goals are measured
// by the harness, never asserted in a timed test on a shared, noisy machine.

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

func TestCompareSite(t *testing.T) {
	s := compareSite("allocs", "f (a.c:1)", 1000, 100, []float64{1100, 950, 700})
	if !reflect.DeepEqual(s.Z, []float64{1, -0.5, -3}) {
		t.Errorf("z = %v", s.Z)
	}
	if math.Abs(s.MeanAbsRel-0.15) > 1e-12 || s.MaxAbsZ != 3 || !s.Within {
		t.Errorf("mean |rel| %v, max |z| %v, within %v", s.MeanAbsRel, s.MaxAbsZ, s.Within)
	}
	if s := compareSite("allocs", "x", 1000, 100, []float64{1500}); s.Within {
		t.Error("a 5σ error is within 4σ")
	}
	// No variance (every block far above the rate is surely sampled): any
	// error is infinitely many σ; no error is fine.
	if s := compareSite("peak", "x", 8<<20, 0, []float64{8 << 20}); !s.Within || s.MaxAbsZ != 0 {
		t.Errorf("exact estimate with σ = 0: %+v", s)
	}
	if s := compareSite("peak", "x", 8<<20, 0, []float64{9 << 20}); s.Within || !math.IsInf(s.MaxAbsZ, 1) {
		t.Errorf("wrong estimate with σ = 0: %+v", s)
	}
	if _, err := json.Marshal(compareSite("peak", "x", 1, 0, []float64{2})); err != nil {
		t.Errorf("an infinite z reached the JSON: %v", err)
	}
}

func TestCalibrate(t *testing.T) {
	c := calibrate([]AccuracyResult{{Sites: []SiteAccuracy{
		{Sigma: 1, Z: []float64{0.5, -1.5, 2.5, -4}},
		{Sigma: 0, Z: []float64{math.Inf(1)}}, // no σ: not counted
	}}})
	if c != (Calibration{N: 4, Within1: 1, Within2: 2, Within3: 3}) {
		t.Errorf("calibrate = %+v", c)
	}
}

func TestReportDocSites(t *testing.T) {
	doc := `{"view":"peak","rate":524288,"heap_at":5000,"drops":{"allocs":1,"frees":2,"lost_bytes":0},
		"total":{"bytes":4500,"samples":3},
		"frames":[{"label":"malloc (libc.so.6)"},{"label":"make_key (cpp_maps.cpp:50)"},{"label":"main (cpp_maps.cpp:90)"},{"label":"other (x.so)"}],
		"stacks":[[0,1,2],[0,2],[3]],
		"samples":{"stack":[0,1,2,0],"bytes":[1000,2000,500,1000]}}`
	var d reportDoc
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	got := d.sites(firstMatching("cpp_maps.cpp:"))
	want := map[string]float64{"make_key (cpp_maps.cpp:50)": 2000, "main (cpp_maps.cpp:90)": 2000, "": 500}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sites = %v, want %v", got, want)
	}
	if d.total("peak") != 5000 || d.total("allocs") != 4500 || d.dropped() != 3 {
		t.Errorf("total peak %v, allocs %v, dropped %v", d.total("peak"), d.total("allocs"), d.dropped())
	}
	if top := topSites(got, 1); !reflect.DeepEqual(top, []string{"main (cpp_maps.cpp:90)"}) {
		t.Errorf("topSites = %v (ties break by name, \"\" excluded)", top)
	}
	if s := findSite(got, "make_key ("); s != "make_key (cpp_maps.cpp:50)" {
		t.Errorf("findSite = %q", s)
	}
}

func TestSiteNames(t *testing.T) {
	py := []string{"<listcomp> (/usr/lib/python3.11/json/encoder.py:10)", "make_payload (/w/bench/workloads/py_server.py:29)",
		"handle (/w/bench/workloads/py_server.py:39)"}
	if got := firstNamed("json")([]string{"0x7f00a37fad93 (_json.cpython-311-x86_64-linux-gnu.so)", py[0]}); got != py[0] {
		t.Errorf("firstNamed took %q", got)
	}
	if got := firstMatching("py_server.py:")(py); got != py[1] {
		t.Errorf("python site = %q", got)
	}
	if got := shortSite(py[1]); got != "make_payload (py_server.py:29)" {
		t.Errorf("shortSite = %q", got)
	}
	sq := []string{"0x7f8706390503 (libsqlite3.so.0)", "sqlite3Malloc (libsqlite3.so.0)", "sqlite3DbMallocRawNN (libsqlite3.so.0)",
		"sqlite3VdbeCreate (libsqlite3.so.0)", "sqlite3_prepare_v2 (libsqlite3.so.0)", "0x562de608746e (sqlite3)"}
	if got := sqliteSite(sq); got != "sqlite3VdbeCreate (libsqlite3.so.0)" {
		t.Errorf("sqlite site = %q", got)
	}
	if got := sqliteSite([]string{"malloc (libc.so.6)", "0x55 (sqlite3)"}); got != "" {
		t.Errorf("no sqlite frame: %q", got)
	}
}

func TestExpectations(t *testing.T) {
	ws := map[string]*workload{}
	for _, w := range allWorkloads(false) {
		ws[w.Name] = w
	}
	e := ws["cpp_maps"].expect([]string{"12", "20000"})
	if e[0].Bytes != 12*2*20000*41 || e[1].Bytes != 12*20000*73 || e[2].Bytes != 12*262144 || e[2].View != "leaks" {
		t.Errorf("cpp_maps expectations %+v", e)
	}
	// py_server keeps request ids 0, 3, 6, 9: four payloads of 100+33 bytes.
	if e := ws["py_server"].expect([]string{"10", "3", "100"}); e[0].Bytes != 4*133 {
		t.Errorf("py_server expectation %+v", e)
	}
	if e := ws["malloc_pairs"].expect([]string{"128", "1000", "2"}); e[0].Bytes != 256000 {
		t.Errorf("malloc_pairs expectation %+v", e)
	}
}

func TestChecksumMismatch(t *testing.T) {
	same := [][]Measurement{{{Checksum: "7"}, {Checksum: "7"}}, {{Checksum: "7"}}}
	if got := checksumMismatch(same); got != "" {
		t.Errorf("equal checksums reported as %q", got)
	}
	diff := [][]Measurement{{{Checksum: "7"}}, {{Checksum: "8"}, {Checksum: "7"}}}
	if got := checksumMismatch(diff); got != "7, 8" {
		t.Errorf("checksumMismatch = %q, want \"7, 8\"", got)
	}
}

func TestRatiosAndFormat(t *testing.T) {
	runs := func(walls ...float64) []Measurement {
		var ms []Measurement
		for _, w := range walls {
			ms = append(ms, Measurement{WallS: w})
		}
		return ms
	}
	// Round by round the second configuration takes 1.5× bare's time,
	// although the rounds' speeds differ by 3×.
	cs := []ConfigResult{{Runs: runs(1, 2, 3, 2, 2), CPUS: 4, SelfRSSKB: 100}, {Runs: runs(1.5, 3, 4.5, 3, 3), CPUS: 4, SelfRSSKB: 150}, {Unavailable: "x"}}
	ratios(cs)
	if cs[1].WallRatio != 1.5 || cs[1].WallCI.Lo != 1.5 || cs[1].WallCI.Hi != 1.5 || cs[1].CPURatio != 1 || cs[1].RSSRatio != 1.5 || cs[2].WallRatio != 0 {
		t.Errorf("ratios: %+v", cs)
	}
	for x, want := range map[float64]string{0: "-", 1.034: "1.03×", 43.2: "43×"} {
		if got := times(x); got != want {
			t.Errorf("times(%v) = %q, want %q", x, got, want)
		}
	}
	if ratio(1, 0) != 0 {
		t.Error("ratio over 0 is not 0")
	}
}

// TestLiveAt replays a hand-made capture: an address freed and reused, a
// block freed after the moment asked for, and one never freed.
func TestLiveAt(t *testing.T) {
	c := capture.NewCapture()
	c.Allocs = []capture.Alloc{
		{Stream: 1, TimeNano: 10, Addr: 0xa, Size: 100}, // 0: freed at 20
		{Stream: 1, TimeNano: 30, Addr: 0xa, Size: 200}, // 1: reuses 0xa, freed at 50
		{Stream: 1, TimeNano: 35, Addr: 0xb, Size: 300}, // 2: never freed
		{Stream: 2, TimeNano: 36, Addr: 0xa, Size: 400}, // 3: another process, same address
	}
	c.Frees = []capture.Free{{Stream: 1, TimeNano: 20, Addr: 0xa}, {Stream: 1, TimeNano: 50, Addr: 0xa}}
	c.FreeOrder = []int32{1, 4}
	for _, tc := range []struct {
		at   int64
		want []int
	}{{15, []int{0}}, {25, []int{}}, {40, []int{1, 2, 3}}, {math.MaxInt64, []int{2, 3}}} {
		if got := liveAt(c, tc.at); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("liveAt(%d) = %v, want %v", tc.at, got, tc.want)
		}
	}
	c.FreeOrder = nil // the time-order fallback gives the same answers here
	if got := liveAt(c, 40); !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Errorf("liveAt without FreeOrder = %v", got)
	}
}

// TestSynthetic writes a small synthetic capture and reads it back: the
// counts asked for, stacks that resolve, and siteSizes consistent with
// the heap package's views.
func TestSynthetic(t *testing.T) {
	p := synthParams{Samples: 5000, Live: 500, Stacks: 50, Locations: 80, Depth: 6, Threads: 3}
	var buf bytes.Buffer
	if err := writeSynthetic(&buf, p); err != nil {
		t.Fatal(err)
	}
	c, err := capture.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Allocs) != p.Samples || len(c.Frees) != p.Samples-p.Live || len(c.Stacks) != p.Stacks || len(c.Locations) != p.Locations {
		t.Fatalf("read %d allocs, %d frees, %d stacks, %d locations", len(c.Allocs), len(c.Frees), len(c.Stacks), len(c.Locations))
	}
	if n := len(liveAt(c, math.MaxInt64)); n != p.Live {
		t.Errorf("%d live at the end, want %d", n, p.Live)
	}
	leaf := func(frames []string) string { return frames[0] }
	sizes := siteSizes(c, leaf, []string{"allocs", "leaks"})
	count := func(m map[uint64]int) (n int) {
		for _, k := range m {
			n += k
		}
		return n
	}
	if n := count(sizes["allocs"][totalSite]); n != p.Samples {
		t.Errorf("allocs sizes count %d, want %d", n, p.Samples)
	}
	if n := count(sizes["leaks"][totalSite]); n != p.Live {
		t.Errorf("leaks sizes count %d, want %d", n, p.Live)
	}
	var bytesLive float64
	for s, k := range sizes["leaks"][totalSite] {
		bytesLive += float64(s) * float64(k)
	}
	// At rate 1 the leaks view is exact: compare with the heap package on
	// the same capture read as rate 1.
	c.Meta.Rate = 1
	if got := heap.Leaks(c, heap.Options{}).TotalBytes; got != bytesLive {
		t.Errorf("live bytes %v, heap.Leaks says %v", bytesLive, got)
	}
	if !strings.HasPrefix(leaf(siteFrames(c)), "module") {
		t.Errorf("synthetic frames look wrong: %q", siteFrames(c))
	}
}

// siteFrames returns the labels of the first allocation's stack.
func siteFrames(c *capture.Capture) []string {
	var out []string
	st := c.Stacks[c.Allocs[0].StackID]
	for _, id := range st.Locations {
		out = append(out, c.Locations[id].Lines[0].Function)
	}
	return out
}

func TestGoal(t *testing.T) {
	for _, tc := range []struct {
		iv   harness.Interval
		want string
	}{
		{harness.Interval{Median: 1.02, Lo: 0.99, Hi: 1.04, Conf: 0.94}, "met"},
		{harness.Interval{Median: 1.2, Lo: 1.1, Hi: 1.3, Conf: 0.94}, "missed"},
		{harness.Interval{Median: 1.04, Lo: 0.97, Hi: 1.12, Conf: 0.94}, "undecided"},
		{harness.Interval{Median: 1.0, Lo: 1.0, Hi: 1.0}, "undecided"}, // too few rounds for any confidence
	} {
		if got := goal(tc.iv, 1.05); got != tc.want {
			t.Errorf("goal(%+v) = %q, want %q", tc.iv, got, tc.want)
		}
	}
}

// TestCommandCallgrind: under callgrind, valgrind wraps the target only —
// after heaplens' "--", so the agent is not counted — and its output file
// is named.
func TestCommandCallgrind(t *testing.T) {
	b := &bench{tmp: "/tmp/x", heaplens: "/bin/heaplens"}
	w := &workload{command: func(b *bench, args []string) []string { return append([]string{"/w"}, args...) }}
	for _, tc := range []struct {
		c    config
		want string
	}{
		{config{callgrind: true}, "valgrind -q --tool=callgrind --callgrind-out-file=/tmp/x/cap-1.callgrind /w 7"},
		{config{profiler: "heaplens", seed: 1, callgrind: true},
			"/bin/heaplens run -q -o /tmp/x/cap-2.hlc --seed 1 -- valgrind -q --tool=callgrind --callgrind-out-file=/tmp/x/cap-2.callgrind /w 7"},
		{config{profiler: "heaplens"}, "/bin/heaplens run -q -o /tmp/x/cap-3.hlc -- /w 7"},
	} {
		argv, _, cg := b.command(tc.c, w, []string{"7"})
		if got := strings.Join(argv, " "); got != tc.want {
			t.Errorf("command(%+v) = %q, want %q", tc.c, got, tc.want)
		}
		if (cg != "") != tc.c.callgrind || !strings.Contains(tc.want, cg) {
			t.Errorf("command(%+v): callgrind file %q", tc.c, cg)
		}
	}
}

// The interpreter's own objects are the executable and libpython; its
// extension modules, the C library and heaplens' library are not.
func TestInterpreterOf(t *testing.T) {
	objs := map[string]uint64{
		"/usr/bin/python3.11": 600,
		"/root/.pyenv/versions/3.12.8/lib/libpython3.12.so.1.0":                 50,
		"/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so": 7,
		"/tmp/heaplens-0/libheaplens-d1335b5e.so":                               3,
		"/usr/lib/x86_64-linux-gnu/libc.so.6":                                   1,
	}
	if got := interpreterOf(objs); got != 650 {
		t.Errorf("interpreterOf = %d, want 650", got)
	}
}

// The per-sample figure and verdict are the layouts' medians: one layout
// where pymalloc's count moved by thousands a sample does not decide it.
func TestLayoutMedians(t *testing.T) {
	bare := InstrCount{Instructions: 1_000_000_000}
	count := func(total, interp uint64) InstrCount { return InstrCount{Instructions: total, Interpreter: interp} }
	floor := count(1_100_000_000, 900_000_000)
	r := &InstrResult{}
	for _, c := range []struct {
		hl, interp uint64
		samples    int
	}{
		{1_100_400_000, 900_000_000, 100}, // 4,000 a sample, all the library's
		{1_100_800_000, 900_400_000, 100}, // 8,000: pymalloc's count moved by 400 k
		{1_100_390_000, 899_990_000, 98},  // 3,979
	} {
		r.Layouts = append(r.Layouts, layoutCost("", c.samples, bare, floor, count(c.hl, c.interp), true))
	}
	r.medians()
	if r.Samples != 100 || math.Round(r.PerSample) != 4000 || math.Round(r.PerSampleApart) != 4000 || r.samplingGoal() != "met" {
		t.Errorf("medians: %d samples, %.0f a sample (%.0f apart), %s; want 100, 4000 (4000), met",
			r.Samples, r.PerSample, r.PerSampleApart, r.samplingGoal())
	}
	if got := r.perSampleRange(); got != "3980–8000" {
		t.Errorf("range %q, want 3980–8000", got)
	}
}
