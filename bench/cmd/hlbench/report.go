package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Machine identifies where the numbers come from: they mean nothing without it.
type Machine struct {
	CPUs   int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Kernel string `json:"kernel"`
	Glibc  string `json:"glibc"`
	Go     string `json:"go"`
}

func machineInfo() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU = cpuModel(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output(); err == nil {
		m.Glibc = strings.TrimSpace(string(b))
	}
	return m
}

// cpuModel returns the first "model name" of /proc/cpuinfo text.
func cpuModel(cpuinfo string) string {
	for _, l := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// ---- the report ----

// Report is everything one invocation measured; malloc.json is this.
type Report struct {
	Date        string           `json:"date"`
	Machine     Machine          `json:"machine"`
	Runs        int              `json:"runs"`
	Quick       bool             `json:"quick"`
	Rate        uint64           `json:"rate"`
	Seconds     float64          `json:"seconds"`
	Pairs       []PairResult     `json:"pairs"`
	Samples     []SampleResult   `json:"per_sample"`
	PairSamples []SampleResult   `json:"per_sample_pairs"`
	PerFrameNs  float64          `json:"per_frame_ns"`
	Callgrind   *CallgrindResult `json:"callgrind,omitempty"`
	Notes       []string         `json:"notes"`
	Warnings    []string         `json:"warnings,omitempty"`
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

// table formats a markdown table whose columns are padded to equal width,
// so it reads as well on a terminal as rendered. A header starting with
// ">" marks a right-aligned (numeric) column; the ">" is not printed.
func table(header []string, rows [][]string) string {
	right := make([]bool, len(header))
	h := make([]string, len(header))
	for i, c := range header {
		right[i] = strings.HasPrefix(c, ">")
		h[i] = strings.TrimPrefix(c, ">")
	}
	w := make([]int, len(h))
	for i, c := range h {
		w[i] = max(3, len([]rune(c)))
	}
	for _, r := range rows {
		for i := range h {
			if i < len(r) {
				w[i] = max(w[i], len([]rune(r[i])))
			}
		}
	}
	pad := func(s string, i int) string {
		n := w[i] - len([]rune(s))
		if right[i] {
			return strings.Repeat(" ", n) + s
		}
		return s + strings.Repeat(" ", n)
	}
	var sb strings.Builder
	line := func(cells []string) {
		sb.WriteString("|")
		for i := range h {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			sb.WriteString(" " + pad(c, i) + " |")
		}
		sb.WriteString("\n")
	}
	line(h)
	sb.WriteString("|")
	for i := range h {
		if right[i] {
			sb.WriteString(" " + strings.Repeat("-", w[i]-1) + ": |")
		} else {
			sb.WriteString(" " + strings.Repeat("-", w[i]) + " |")
		}
	}
	sb.WriteString("\n")
	for _, r := range rows {
		line(r)
	}
	return sb.String()
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }

func formatMarkdown(r Report) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# heaplens malloc overhead\n\n")
	fmt.Fprintf(&sb, "%s · nproc %d · %s · kernel %s · %s · %s · %d runs per configuration (median)",
		r.Date, r.Machine.CPUs, r.Machine.CPU, r.Machine.Kernel, r.Machine.Glibc, r.Machine.Go, r.Runs)
	if r.Quick {
		sb.WriteString(" · QUICK (smoke test, not for quoting)")
	}
	fmt.Fprintf(&sb, " · %.0f s\n\n", r.Seconds)

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
		rows = append(rows, []string{pairLabel(p), strconv.FormatUint(p.Iters, 10), f1(p.Bare), f1(p.Inactive), f1(p.Heaplens),
			f1(p.Added), f2(p.Ratio), f2(p.InactRatio), strconv.FormatFloat(p.SampleProb, 'g', 3, 64), f1(p.Unsampled),
			f1(p.Budget), within})
	}
	sb.WriteString(table([]string{"config", ">iters", ">bare ns", ">inactive ns", ">heaplens ns", ">added ns", ">ratio",
		">inactive ratio", ">P(sample)", ">unsampled ns", ">budget ns", "within"}, rows))

	if all := append(append([]SampleResult(nil), r.Samples...), r.PairSamples...); len(all) > 0 {
		sb.WriteString("\n## Per-sample cost (heaplens run --rate 1 vs bare: ALLOC record with stack + FREE record)\n\n")
		rows = nil
		for _, s := range all {
			rows = append(rows, []string{sampleLabel(s), strconv.Itoa(s.Frames), strconv.FormatUint(s.N, 10),
				f1(median(s.BareNs)), f1(median(s.Rate1Ns)), f2(s.PerSampleNs / 1000)})
		}
		sb.WriteString(table([]string{"workload", ">frames", ">N", ">bare ns/alloc", ">rate 1 ns/alloc", ">µs per sample"}, rows))
		if !math.IsNaN(r.PerFrameNs) {
			fmt.Fprintf(&sb, "\nSlope: %.0f ns per frame (least squares over the deep_sample depths).\n", r.PerFrameNs)
		}
	}

	if r.Callgrind != nil {
		sb.WriteString("\n## Instructions (callgrind, counted inside the timed function only)\n\n")
		rows = nil
		for _, c := range r.Callgrind.Rows {
			rows = append(rows, []string{c.Name, fmt.Sprintf("%d %ss", c.Units, c.Per), f1(c.BarePer), f1(c.AddedPer)})
		}
		sb.WriteString(table([]string{"run", ">units", ">bare Ir/unit", ">added Ir/unit"}, rows))
		if len(r.Callgrind.FastPath) > 0 {
			sb.WriteString("\nUnsampled fast path, self instructions per pair in libheaplens.so:\n\n")
			rows = nil
			for _, f := range r.Callgrind.FastPath {
				rows = append(rows, []string{f.Function, f2(f.PerPair)})
			}
			sb.WriteString(table([]string{"function", ">Ir per pair"}, rows))
		}
	}
	if len(r.Notes) > 0 {
		sb.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			sb.WriteString("- " + n + "\n")
		}
	}
	if len(r.Warnings) > 0 {
		sb.WriteString("\n## Warnings\n\n")
		for _, w := range r.Warnings {
			sb.WriteString("- " + w + "\n")
		}
	}
	return sb.String()
}
