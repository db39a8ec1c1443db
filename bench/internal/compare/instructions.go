package compare

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// InstrResult is one workload's instructions under callgrind at its small
// size: the target's own (heaplens' agent is not under valgrind), bare and
// with heaplens at the default rate and a fixed seed. Wall time on a shared
// machine moves by ±10 % from run to run; these counts by well under 0.1 %,
// so they show an in-process cost of a few percent that medians of wall
// time cannot.
type InstrResult struct {
	Workload string       `json:"workload"`
	Args     []string     `json:"args"`
	Counts   []InstrCount `json:"counts"`
}

// InstrCount is one configuration's count and its ratio over bare's.
type InstrCount struct {
	Config       string  `json:"config"`
	Instructions uint64  `json:"instructions"`
	Ratio        float64 `json:"ratio"`
}

// count returns the named configuration's count, nil when absent.
func (r *InstrResult) count(config string) *InstrCount {
	for i := range r.Counts {
		if r.Counts[i].Config == config {
			return &r.Counts[i]
		}
	}
	return nil
}

// instructions counts w's instructions bare, under heaplens and, for a
// Python workload, under heaplens --no-python. One run each: the counts
// are deterministic enough (fixed seed, PYTHONHASHSEED=0).
func (b *bench) instructions(w *workload) (*InstrResult, error) {
	if b.peers.ValgrindReason != "" {
		b.warnings.Add("no instruction counts: " + b.peers.ValgrindReason)
		return nil, nil
	}
	cfgs := []config{cfgBare, cfgHeaplens}
	if w.python {
		cfgs = append(cfgs, cfgNoPy)
	}
	for i := range cfgs {
		cfgs[i].callgrind = true
		if cfgs[i].profiler == "heaplens" {
			cfgs[i].seed = 1 // the same samples every run
		}
	}
	logf("%s %s: instructions under callgrind", w.Name, strings.Join(w.Small, " "))
	res := &InstrResult{Workload: w.Name, Args: w.Small}
	for _, c := range cfgs {
		m, err := b.runOnce(c, w, w.Small, false)
		if err != nil {
			return nil, err
		}
		res.Counts = append(res.Counts, InstrCount{Config: c.Name, Instructions: m.Instructions})
	}
	for i := range res.Counts {
		res.Counts[i].Ratio = ratio(float64(res.Counts[i].Instructions), float64(res.Counts[0].Instructions))
	}
	return res, nil
}

func writeInstructions(sb *strings.Builder, r *Report) {
	if len(r.Instructions) == 0 {
		return
	}
	sb.WriteString("## Instructions: the in-process cost without the noise\n\n" +
		"The target's instructions under `valgrind --tool=callgrind` (heaplens' agent runs outside valgrind and is not " +
		"counted: its CPU is the \"other s\" column above), at the small size, one run each; heaplens at the default rate " +
		"with `--seed 1`. These counts move by well under 0.1 % between runs, where wall time moves by ±10 %.\n\n")
	var rows [][]string
	for _, in := range r.Instructions {
		row := []string{in.Workload, strings.Join(in.Args, " ")}
		for _, name := range []string{cfgBare.Name, cfgHeaplens.Name, cfgNoPy.Name} {
			c := in.count(name)
			if c == nil {
				row = append(row, "-", "-")
				continue
			}
			row = append(row, fmt.Sprintf("%.1f M", float64(c.Instructions)/1e6))
			if name != cfgBare.Name {
				row = append(row, fmt.Sprintf("%+.1f%%", 100*(c.Ratio-1)))
			}
		}
		rows = append(rows, row)
	}
	sb.WriteString(harness.Table([]string{"workload", "args", ">bare", ">heaplens", ">added", ">heaplens --no-python", ">added"}, rows))
	sb.WriteString("\n")
}
