package compare

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// ConfigResult is one configuration of one workload at one size: every
// run, medians, and ratios over the bare run of the same size.
type ConfigResult struct {
	Config      string        `json:"config"`
	Args        []string      `json:"args"`
	Unavailable string        `json:"unavailable,omitempty"` // why it was not run
	Runs        []Measurement `json:"runs,omitempty"`
	WallS       float64       `json:"wall_s_median"`
	CPUS        float64       `json:"cpu_s_median"`
	LoopS       float64       `json:"loop_s_median,omitempty"`
	TreeRSSKB   float64       `json:"tree_maxrss_kb_median"`
	SelfRSSKB   float64       `json:"self_maxrss_kb_median"`
	Capture     float64       `json:"capture_bytes_median"`
	// WallRatio is the median over rounds of wall / bare's wall in the
	// same round, WallCI its confidence interval (harness.PairedRatio).
	WallRatio float64          `json:"wall_ratio"`
	WallCI    harness.Interval `json:"wall_ratio_interval"`
	CPURatio  float64          `json:"cpu_ratio"`
	RSSRatio  float64          `json:"self_rss_ratio"` // target's peak RSS / bare's
	// TargetCPUS is the target's own CPU (median), OtherCPUS the rest of
	// the tree's (median of CPU − target CPU: heaplens' agent,
	// heaptrack_interpret), and TargetCPURatio the target's CPU over
	// bare's: the profiler's in-process cost alone.
	TargetCPUS     float64 `json:"target_cpu_s_median"`
	OtherCPUS      float64 `json:"other_cpu_s_median"`
	TargetCPURatio float64 `json:"target_cpu_ratio"`
	// CaptureVsMemray is the capture size over memray's (default mode) on
	// the same workload, for heaplens at the default rate.
	CaptureVsMemray float64 `json:"capture_vs_memray,omitempty"`
	// CaptureVsMemrayT is the same over memray --trace-python-allocators,
	// which records the Python objects heaplens samples (like for like).
	CaptureVsMemrayT float64 `json:"capture_vs_memray_trace_python_allocators,omitempty"`
}

// WorkloadResult is one workload's overhead measurements.
type WorkloadResult struct {
	Name  string   `json:"name"`
	Kind  string   `json:"kind"`
	Desc  string   `json:"description"`
	Full  []string `json:"args_full"`
	Small []string `json:"args_small"`
	// Configs at the full size: bare, heaplens (default rate), heaptrack,
	// memray (default, --native, --aggregate, --trace-python-allocators).
	Configs []ConfigResult `json:"configs"`
	// SmallConfigs at the small size: bare, heaplens --rate 1, and
	// heaplens at the default rate with seeds 1…runs (the accuracy runs).
	SmallConfigs []ConfigResult `json:"small_configs"`
	Checksums    string         `json:"checksum_mismatch,omitempty"`
}

// Config returns the named configuration's result at the full size, else
// at the small size, or nil.
func (w *WorkloadResult) Config(name string) *ConfigResult {
	for _, cs := range [][]ConfigResult{w.Configs, w.SmallConfigs} {
		for i := range cs {
			if cs[i].Config == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// overhead runs w at its full size in every configuration, interleaved.
func (b *bench) overhead(w *workload) (WorkloadResult, error) {
	res := WorkloadResult{Name: w.Name, Kind: w.Kind, Desc: w.Desc, Full: w.Full, Small: w.Small}
	all := []config{cfgBare, cfgHeaplens, cfgNoPy, cfgHeaptrack, cfgMemray, cfgMemrayN, cfgMemrayA, cfgMemrayT}
	if b.o.Baseline != "" {
		all = append(all, baseline(b.o.Baseline))
	}
	var cfgs []config
	skipped := map[string]string{}
	for _, c := range all {
		if why := b.unavailable(c, w); why != "" {
			skipped[c.Name] = why
			continue
		}
		cfgs = append(cfgs, c)
	}
	// One untimed run each of bare and heaplens warms the page cache and
	// heaplens' symbol cache, which every later run of a user finds warm.
	for _, c := range []config{cfgBare, cfgHeaplens} {
		if _, err := b.runOnce(c, w, w.Full, false); err != nil {
			return res, err
		}
	}
	logf("%s %s: %d configurations × %d runs", w.Name, strings.Join(w.Full, " "), len(cfgs), b.o.Runs)
	ms, err := b.interleave(w, w.Full, cfgs, nil)
	if err != nil {
		return res, err
	}
	j := 0
	for _, c := range all {
		if why, ok := skipped[c.Name]; ok {
			res.Configs = append(res.Configs, ConfigResult{Config: c.Name, Args: w.Full, Unavailable: why})
			continue
		}
		res.Configs = append(res.Configs, summarize(c.Name, w.Full, ms[j]))
		j++
	}
	ratios(res.Configs)
	if hl := res.Config(cfgHeaplens.Name); hl != nil {
		if mr := res.Config(cfgMemray.Name); mr != nil && mr.Unavailable == "" && mr.Capture > 0 {
			hl.CaptureVsMemray = hl.Capture / mr.Capture
		}
		if mr := res.Config(cfgMemrayT.Name); mr != nil && mr.Unavailable == "" && mr.Capture > 0 {
			hl.CaptureVsMemrayT = hl.Capture / mr.Capture
		}
	}
	for _, c := range res.Configs {
		if c.Unavailable == "" {
			logf("%s, %s: %.2f s (×%.3f wall, ×%.3f cpu), capture %s", w.Name, c.Config, c.WallS, c.WallRatio, c.CPURatio, harness.ByteLabel(c.Capture))
		}
	}
	res.Checksums = checksumMismatch(ms)
	if res.Checksums != "" {
		b.warnings.Add(fmt.Sprintf("%s: checksums differ between runs: %s", w.Name, res.Checksums))
	}
	return res, nil
}

func wallS(m Measurement) float64 { return m.WallS }

// summarize takes the medians of one configuration's runs.
func summarize(name string, args []string, ms []Measurement) ConfigResult {
	med := func(f func(Measurement) float64) float64 { return harness.Median(harness.Field(ms, f)) }
	return ConfigResult{
		Config:     name,
		Args:       args,
		Runs:       ms,
		WallS:      med(wallS),
		CPUS:       med(func(m Measurement) float64 { return m.CPUS }),
		LoopS:      med(func(m Measurement) float64 { return m.LoopS }),
		TreeRSSKB:  med(func(m Measurement) float64 { return float64(m.TreeRSSKB) }),
		SelfRSSKB:  med(func(m Measurement) float64 { return float64(m.SelfRSSKB) }),
		Capture:    med(func(m Measurement) float64 { return float64(m.CaptureBytes) }),
		TargetCPUS: med(func(m Measurement) float64 { return m.TargetCPUS }),
		OtherCPUS:  med(func(m Measurement) float64 { return m.CPUS - m.TargetCPUS }),
	}
}

// ratioConf is the least coverage of the wall ratio's confidence interval.
const ratioConf = 0.9

// ratios divides every available configuration's medians by those of the
// first one (bare), and its wall times by bare's round by round.
func ratios(cs []ConfigResult) {
	if len(cs) == 0 {
		return
	}
	bare := cs[0]
	for i := range cs {
		c := &cs[i]
		if c.Unavailable != "" {
			continue
		}
		c.WallCI = harness.PairedRatio(harness.Field(c.Runs, wallS), harness.Field(bare.Runs, wallS), ratioConf)
		c.WallRatio = c.WallCI.Median
		c.CPURatio = ratio(c.CPUS, bare.CPUS)
		c.RSSRatio = ratio(c.SelfRSSKB, bare.SelfRSSKB)
		c.TargetCPURatio = ratio(c.TargetCPUS, bare.TargetCPUS)
	}
}

// ratio is a/b, 0 when b is 0 (JSON cannot hold Inf or NaN).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// checksumMismatch returns "" when every run printed the same checksum,
// else the distinct values.
func checksumMismatch(ms [][]Measurement) string {
	seen := map[string]bool{}
	var order []string
	for _, runs := range ms {
		for _, m := range runs {
			if !seen[m.Checksum] {
				seen[m.Checksum] = true
				order = append(order, m.Checksum)
			}
		}
	}
	if len(order) <= 1 {
		return ""
	}
	return strings.Join(order, ", ")
}
