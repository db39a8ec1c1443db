package compare

import (
	"os"
	"path/filepath"
)

// StartupResult is the fixed cost of `heaplens run` on a program that does
// almost nothing: extracting the library, creating the ring, symbolizing
// the few stacks sampled at start-up, writing the capture.
type StartupResult struct {
	Program string         `json:"program"`
	Configs []ConfigResult `json:"configs"` // bare, heaplens (warm caches), heaplens (cold caches)
	// Added wall and CPU time over bare, milliseconds (medians).
	WarmWallMs float64 `json:"warm_added_wall_ms"`
	WarmCPUMs  float64 `json:"warm_added_cpu_ms"`
	ColdWallMs float64 `json:"cold_added_wall_ms"`
	ColdCPUMs  float64 `json:"cold_added_cpu_ms"`
}

// startup measures the fixed cost on a Python start-up (which allocates
// a few MB, so a few stacks through libc are sampled and symbolized) and
// on a tiny C++ run. "Cold" runs with an empty XDG_CACHE_HOME, as the
// first run on a machine: the library is extracted again and no symbol is
// cached (libc's separate debug file is decompressed and indexed).
func (b *bench) startup() ([]StartupResult, error) {
	progs := []*workload{
		{Name: "python3 -c pass", key: "checksum", Full: []string{"-c", "print('checksum=0')"},
			command: func(b *bench, args []string) []string { return append([]string{b.peers.VenvPython}, args...) }},
	}
	if _, err := os.Stat(filepath.Join(b.tmp, "cpp_maps")); err == nil {
		progs = append(progs, &workload{Name: "cpp_maps 1 2000", key: "checksum", Full: []string{"1", "2000"},
			command: func(b *bench, args []string) []string {
				return append([]string{filepath.Join(b.tmp, "cpp_maps")}, args...)
			}})
	}
	runs := b.o.Runs + 2 // cheap: a few more runs steady the medians of short runs
	var out []StartupResult
	for _, w := range progs {
		cfgs := []config{cfgBare, cfgHeaplens, cfgCold}
		if b.o.Baseline != "" {
			cfgs = append(cfgs, baseline(b.o.Baseline))
		}
		if _, err := b.runOnce(cfgHeaplens, w, w.Full, false); err != nil { // warm the caches
			return nil, err
		}
		saved := b.o.Runs
		b.o.Runs = runs
		ms, err := b.interleave(w, w.Full, cfgs, nil)
		b.o.Runs = saved
		if err != nil {
			return nil, err
		}
		r := StartupResult{Program: w.Name}
		for j, c := range cfgs {
			r.Configs = append(r.Configs, summarize(c.Name, w.Full, ms[j]))
		}
		ratios(r.Configs)
		bare, warm, cold := r.Configs[0], r.Configs[1], r.Configs[2]
		r.WarmWallMs, r.WarmCPUMs = 1000*(warm.WallS-bare.WallS), 1000*(warm.CPUS-bare.CPUS)
		r.ColdWallMs, r.ColdCPUMs = 1000*(cold.WallS-bare.WallS), 1000*(cold.CPUS-bare.CPUS)
		logf("start-up, %s: +%.0f ms wall, +%.0f ms CPU warm; +%.0f ms wall, +%.0f ms CPU cold",
			w.Name, r.WarmWallMs, r.WarmCPUMs, r.ColdWallMs, r.ColdCPUMs)
		out = append(out, r)
	}
	return out, nil
}
