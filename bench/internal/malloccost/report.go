package malloccost

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// ---- the report ----

// Report is everything one invocation measured; malloc.json is this.
type Report struct {
	harness.Stamp
	Rate        uint64           `json:"rate"`
	Pairs       []PairResult     `json:"pairs"`
	Samples     []SampleResult   `json:"per_sample"`
	PairSamples []SampleResult   `json:"per_sample_pairs"`
	PerFrameNs  float64          `json:"per_frame_ns"`
	Callgrind   *CallgrindResult `json:"callgrind,omitempty"`
	Notes       []string         `json:"notes"`
}

// MarshalJSON-safe: NaN (no slope with one depth) is not valid JSON.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	p := plain(r)
	if math.IsNaN(p.PerFrameNs) {
		p.PerFrameNs = 0
	}
	return json.Marshal(p)
}

func sizeLabel(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func pairLabel(r PairResult) string {
	s := fmt.Sprintf("%s × %d thr", sizeLabel(r.Size), r.Threads)
	if r.Variant != "" {
		s += ", " + r.Variant
	}
	return s
}

func formatMarkdown(r Report) string {
	var sb strings.Builder
	sb.WriteString(r.Header("heaplens malloc overhead", "") + "\n\n")

	fmt.Fprintf(&sb, "## malloc+free pair (heaplens run, rate %s)\n\n", sizeLabel(r.Rate))
	sb.WriteString("ns per pair = max over threads of (thread loop time / ITERS). added = heaplens − bare. " +
		"P(sample) = chance one allocation is sampled. sampling = P(sample) × per-sample cost at this stack " +
		"with as many threads (malloc_pairs 128 B at rate 1, below). unsampled = added − sampling: the fast " +
		"path's share, by estimate. budget (the issue's goals) = bare + sampling + 5 % of bare for 8 MiB, " +
		"+ 2 ns for smaller sizes.\n\n")
	var rows [][]string
	for _, p := range r.Pairs {
		within := "yes"
		if !p.Within {
			within = "NO"
		}
		rows = append(rows, []string{pairLabel(p), strconv.FormatUint(p.Iters, 10), harness.F1(p.Bare), harness.F1(p.Inactive), harness.F1(p.Heaplens),
			harness.F1(p.Added), harness.F2(p.Ratio), harness.F2(p.InactRatio), strconv.FormatFloat(p.SampleProb, 'g', 3, 64), harness.F1(p.Unsampled),
			harness.F1(p.Budget), within})
	}
	sb.WriteString(harness.Table([]string{"config", ">iters", ">bare ns", ">inactive ns", ">heaplens ns", ">added ns", ">ratio",
		">inactive ratio", ">P(sample)", ">unsampled ns", ">budget ns", "within"}, rows))

	if all := append(append([]SampleResult(nil), r.Samples...), r.PairSamples...); len(all) > 0 {
		sb.WriteString("\n## Per-sample cost (heaplens run --rate 1 vs bare: ALLOC record with stack + FREE record)\n\n")
		rows = nil
		for _, s := range all {
			rows = append(rows, []string{sampleLabel(s), strconv.Itoa(s.Frames), strconv.FormatUint(s.N, 10),
				harness.F1(harness.Median(s.BareNs)), harness.F1(harness.Median(s.Rate1Ns)), harness.F2(s.PerSampleNs / 1000)})
		}
		sb.WriteString(harness.Table([]string{"workload", ">frames", ">N", ">bare ns/alloc", ">rate 1 ns/alloc", ">µs per sample"}, rows))
		if !math.IsNaN(r.PerFrameNs) {
			fmt.Fprintf(&sb, "\nSlope: %.0f ns per frame (least squares over the deep_sample depths).\n", r.PerFrameNs)
		}
	}

	if r.Callgrind != nil {
		sb.WriteString("\n## Instructions (callgrind, counted inside the timed function only)\n\n")
		rows = nil
		for _, c := range r.Callgrind.Rows {
			rows = append(rows, []string{c.Name, fmt.Sprintf("%d %ss", c.Units, c.Per), harness.F1(c.BarePer), harness.F1(c.AddedPer)})
		}
		sb.WriteString(harness.Table([]string{"run", ">units", ">bare Ir/unit", ">added Ir/unit"}, rows))
		if len(r.Callgrind.FastPath) > 0 {
			sb.WriteString("\nUnsampled fast path, self instructions per pair in libheaplens.so:\n\n")
			rows = nil
			for _, f := range r.Callgrind.FastPath {
				rows = append(rows, []string{f.Function, harness.F2(f.PerPair)})
			}
			sb.WriteString(harness.Table([]string{"function", ">Ir per pair"}, rows))
		}
	}
	sb.WriteString(harness.Bullets("Notes", r.Notes))
	sb.WriteString(harness.Bullets("Warnings", r.Warnings))
	return sb.String()
}
