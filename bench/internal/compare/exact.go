package compare

import (
	"fmt"
	"os"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// goalExactBare is the exact mode's goal on pure-Python workloads: tree
// CPU at --rate 1 at most this many times bare's. The first goal is
// memray's like-for-like mode's tree CPU (a ratio of 1 between them).
const goalExactBare = 3.0

// ExactResult is one Python workload at --rate 1 beside memray's
// like-for-like mode (every allocation, pymalloc's objects included, with
// native and Python frames), interleaved with bare runs.
type ExactResult struct {
	Workload string         `json:"workload"`
	Args     []string       `json:"args"`
	PurePy   bool           `json:"pure_python"`
	Configs  []ConfigResult `json:"configs"` // bare, heaplens --rate 1, memray --native --trace-python-allocators
	// CPU and MemrayCPU are tree CPU over bare's, round by round;
	// VsMemray heaplens' over memray's, round by round.
	CPU       harness.Interval `json:"cpu_ratio"`
	MemrayCPU harness.Interval `json:"memray_cpu_ratio"`
	VsMemray  harness.Interval `json:"vs_memray_cpu_ratio"`
	// MemrayGoal: VsMemray ≤ 1; BareGoal: CPU ≤ goalExactBare (pure
	// Python only): "met", "missed" or "undecided" (goal's words).
	MemrayGoal string `json:"memray_goal"`
	BareGoal   string `json:"bare_goal,omitempty"`
	// Drops are the records heaplens' last --rate 1 run dropped (its
	// ring full while the agent fell behind): then it did less than
	// memray, which never drops, and was not exact.
	Drops uint64 `json:"heaplens_drops"`
}

func cpuS(m Measurement) float64 { return m.CPUS }

// exact runs w at its exact-mode size: bare, heaplens --rate 1 and memray
// --native --trace-python-allocators, interleaved.
func (b *bench) exact(w *workload) (*ExactResult, error) {
	cfgs := []config{cfgBare, cfgRate1, cfgMemrayNT}
	if why := b.unavailable(cfgMemrayNT, w); why != "" {
		b.warnings.Add(fmt.Sprintf("!!! %s: no exact-mode comparison: memray %s", w.Name, why))
		return nil, nil
	}
	args := w.exactArgs()
	logf("%s %s: exact mode, %d configurations × %d runs", w.Name, strings.Join(args, " "), len(cfgs), b.o.Runs)
	if _, err := b.runOnce(cfgBare, w, args, false); err != nil { // warms the page cache
		return nil, err
	}
	ms, err := b.interleave(w, args, cfgs, func(j, i int) bool { return j == 1 && i == b.o.Runs-1 })
	if err != nil {
		return nil, err
	}
	res := &ExactResult{Workload: w.Name, Args: args, PurePy: w.purePython}
	if last := ms[1][len(ms[1])-1]; last.capture != "" {
		doc, err := b.report(last.capture, "allocs")
		os.Remove(last.capture)
		if err != nil {
			return nil, err
		}
		res.Drops = doc.dropped()
		if res.Drops > 0 {
			b.warnings.Add(fmt.Sprintf("!!! %s: heaplens --rate 1 dropped %d records (not exact: its agent fell behind)", w.Name, res.Drops))
		}
	}
	for j, c := range cfgs {
		res.Configs = append(res.Configs, summarize(c.Name, args, ms[j]))
	}
	ratios(res.Configs)
	cpu := func(j int) []float64 { return harness.Field(ms[j], cpuS) }
	res.CPU = harness.PairedRatio(cpu(1), cpu(0), ratioConf)
	res.MemrayCPU = harness.PairedRatio(cpu(2), cpu(0), ratioConf)
	res.VsMemray = harness.PairedRatio(cpu(1), cpu(2), ratioConf)
	res.MemrayGoal = goal(res.VsMemray, 1)
	if w.purePython {
		res.BareGoal = goal(res.CPU, goalExactBare)
	}
	if m := checksumMismatch(ms); m != "" {
		b.warnings.Add(fmt.Sprintf("%s (exact mode): checksums differ between runs: %s", w.Name, m))
	}
	logf("%s exact: heaplens ×%.2f, memray ×%.2f tree CPU; heaplens/memray %.2f (%s)", w.Name, res.CPU.Median, res.MemrayCPU.Median, res.VsMemray.Median, res.MemrayGoal)
	return res, nil
}

func writeExact(sb *strings.Builder, r *Report) {
	if len(r.Exact) == 0 {
		return
	}
	fmt.Fprintf(sb, "## Exact mode against memray's\n\n"+
		"`heaplens run --rate 1` against `memray run --native --trace-python-allocators` (every allocation, pymalloc's "+
		"objects included, native and Python frames), bare runs interleaved, %d rounds. Tree CPU (the target, heaplens' "+
		"agent, memray's own threads), over bare's and over each other's round by round, with confidence intervals. "+
		"Goals: heaplens ≤ memray on each workload; then ≤ %.0f× bare on the pure-Python ones. heaplens records more "+
		"than memray in the same run where thread pools hand work over (the submitting thread's stack, ORIGIN records) "+
		"and reports pymalloc's objects as Python objects with their own sizes, where memray's native mode shows them "+
		"inside pymalloc's arenas.\n\n", r.Runs, goalExactBare)
	var rows [][]string
	for _, e := range r.Exact {
		row := []string{e.Workload, strings.Join(e.Args, " ")}
		for _, c := range e.Configs {
			row = append(row, harness.F2(c.CPUS))
		}
		bare := e.BareGoal
		if bare == "" {
			bare = "-"
		}
		row = append(row, times(e.CPU.Median)+" "+interval(e.CPU), times(e.MemrayCPU.Median)+" "+interval(e.MemrayCPU),
			harness.F2(e.VsMemray.Median)+" "+interval(e.VsMemray), e.MemrayGoal, bare,
			harness.ByteLabel(e.Configs[1].Capture), harness.ByteLabel(e.Configs[2].Capture), fmt.Sprint(e.Drops))
		rows = append(rows, row)
	}
	sb.WriteString(harness.Table([]string{"workload", "args", ">bare cpu s", ">heaplens cpu s", ">memray cpu s",
		">heaplens / bare", ">memray / bare", ">heaplens / memray", "≤ memray", fmt.Sprintf("≤ %.0f× bare", goalExactBare),
		">heaplens capture", ">memray capture", ">heaplens drops"}, rows))
	sb.WriteString("\n")
}
