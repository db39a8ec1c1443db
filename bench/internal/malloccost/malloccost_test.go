package malloccost

// These tests cover the harness's pure helpers only. Nothing here times
// anything: speed goals are measured by the harness, never asserted in a
// timed test on a shared, noisy machine.

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

func TestParseKV(t *testing.T) {
	kv := harness.ParseKV("ns_per_pair=12.500 min_ns_per_pair=11 wall_ns=125000000 junk x=notanumber")
	if kv["ns_per_pair"] != 12.5 || kv["min_ns_per_pair"] != 11 || kv["wall_ns"] != 125e6 {
		t.Errorf("parseKV = %v", kv)
	}
	if _, ok := kv["x"]; ok {
		t.Error("non-numeric value kept")
	}
	if got := lastLine("warming up\nns_per_alloc=3\n\n"); got != "ns_per_alloc=3" {
		t.Errorf("lastLine = %q", got)
	}
}

func TestParseAnnotate(t *testing.T) {
	out := `--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
12,800,000 (41.29%)  ./malloc/./malloc/malloc.c:_int_free [/usr/lib/x86_64-linux-gnu/libc.so.6]
 1,400,000 ( 4.52%)  /work/main/preload/heaplens.c:free [/work/main/internal/launch/libheaplens.so]
 1,399,999 ( 4.52%)  /work/main/preload/heaplens.c:malloc [/work/main/internal/launch/libheaplens.so]
        12 ( 0.00%)  ???:malloc.cold [/work/main/internal/launch/libheaplens.so]
   600,000 ( 1.94%)  ./malloc/./malloc/arena.c:free
`
	got := parseAnnotate(out, "libheaplens.so")
	want := []FuncCost{{Function: "free", Ir: 1400000}, {Function: "malloc", Ir: 1399999}, {Function: "malloc.cold", Ir: 12}}
	if len(got) != len(want) {
		t.Fatalf("parseAnnotate = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parseAnnotate[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSampleProb(t *testing.T) {
	if p := sampleProb(128, 1); p != 1 {
		t.Errorf("rate 1: %v", p)
	}
	// 1 - e^-16 for 8 MiB at 512 KiB: every pair is sampled.
	if p := sampleProb(8<<20, 512<<10); p < 0.9999998 || p > 1 {
		t.Errorf("8 MiB: %v", p)
	}
	// Small sizes: about size/rate.
	if p := sampleProb(128, 512<<10); math.Abs(p-128.0/(512<<10)) > 1e-7 {
		t.Errorf("128 B: %v", p)
	}
}

func TestItersFor(t *testing.T) {
	for _, c := range []struct {
		ns   float64
		want uint64
	}{
		{10, 40000000}, // 0.4 s / 10 ns
		{3, 130000000}, // 133.3M rounded to two digits
		{1e9, 1000},    // floor
		{0, 1000},      // no measurement
		{12345, 32000}, // 32402 → 32000
		{math.NaN(), 1000},
	} {
		if got := itersFor(400*time.Millisecond, c.ns); got != c.want {
			t.Errorf("itersFor(400ms, %v) = %d, want %d", c.ns, got, c.want)
		}
	}
}

func TestPerFrameSlope(t *testing.T) {
	s := []SampleResult{{Frames: 5, PerSampleNs: 1500}, {Frames: 9, PerSampleNs: 1900}, {Frames: 54, PerSampleNs: 6400}}
	if got := perFrameSlope(s); math.Abs(got-100) > 1e-9 {
		t.Errorf("slope = %v, want 100", got)
	}
	if !math.IsNaN(perFrameSlope(s[:1])) {
		t.Error("slope of one point is not NaN")
	}
}

func TestSizeLabel(t *testing.T) {
	for n, want := range map[uint64]string{128: "128 B", 16384: "16 KiB", 1 << 20: "1 MiB", 8 << 20: "8 MiB", 1000: "1000 B"} {
		if got := sizeLabel(n); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatMarkdown(t *testing.T) {
	r := Report{
		Stamp: harness.Stamp{Date: "2026-01-02T03:04:05Z", Runs: 7,
			Machine: harness.Machine{CPUs: 2, CPU: "Test CPU", Kernel: "6.1", Glibc: "glibc 2.36", Go: "go1.26"}},
		Rate: 512 << 10,
		Pairs: []PairResult{
			{Size: 128, Threads: 1, Iters: 1000, Bare: 10, Inactive: 10.5, Heaplens: 11, Added: 1, Ratio: 1.1, InactRatio: 1.05, SampleProb: 0.000244, Budget: 10.9},
			{Size: 8 << 20, Threads: 2, Variant: "mmap pinned", Iters: 10, Bare: 10000, Heaplens: 11000, Ratio: 1.1, SampleProb: 1, Budget: 12500, Within: true},
		},
		Samples:    []SampleResult{{Workload: "deep_sample", Depth: 50, Frames: 54, N: 100, BareNs: []float64{8}, Rate1Ns: []float64{6008}, PerSampleNs: 6000}},
		PerFrameNs: math.NaN(),
		Callgrind: &CallgrindResult{
			Rows:     []CallgrindRow{cgRow("malloc_pairs 128 B, active, nothing sampled", "pair", 100, 14100, 15500, "worker")},
			FastPath: []FuncCost{{Function: "malloc", Ir: 700, PerPair: 7}},
		},
		Notes: []string{"a note"},
	}
	md := formatMarkdown(r)
	for _, want := range []string{
		"Test CPU, 2 vCPUs · kernel 6.1 · glibc 2.36",
		"| 128 B × 1 thr ",
		"| NO ",
		"| 8 MiB × 2 thr, mmap pinned ",
		"| yes ",
		"deep_sample depth 50",
		"6.00 |", // µs per sample
		"14.0 |", // added instructions per pair
		"- a note",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Slope") {
		t.Error("slope printed without enough depths")
	}
	// NaN must not make the JSON invalid.
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatalf("json does not round-trip: %v", err)
	}
}

func TestSlack(t *testing.T) {
	if got := slack(8<<20, 10000); got != 500 {
		t.Errorf("8 MiB slack = %v, want 5 %% of bare", got)
	}
	if got := slack(128, 10000); got != goalUnsampledNs {
		t.Errorf("128 B slack = %v, want the unsampled goal", got)
	}
}
