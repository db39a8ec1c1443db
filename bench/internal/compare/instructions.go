package compare

import (
	"fmt"
	"os"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// Goals of the in-process cost, in the target's instructions: the floor
// any interposer pays is measured apart (cfgFloor), and sampling above it
// is held to these at the default rate.
const (
	goalSamplingFrac = 0.005 // sampling's instructions over bare's
	goalPerSample    = 5000  // sampling's instructions per sample
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
	// Samples is the default-rate run's sample count; Floor the floor's
	// instructions over bare's, less 1; Sampling the default rate's above
	// the floor over bare's; PerSample the same per sample.
	Samples   int     `json:"samples"`
	Floor     float64 `json:"floor_frac"`
	Sampling  float64 `json:"sampling_frac"`
	PerSample float64 `json:"sampling_per_sample"`
	// PerSampleApart is PerSample with the interpreter's own instructions
	// left out of both runs (Python workloads): what the library and the
	// C libraries it calls add per sample, free of pymalloc's count moving
	// with the address layout (interpreterOf).
	PerSampleApart float64 `json:"sampling_per_sample_interpreter_apart,omitempty"`
}

// InstrCount is one configuration's count and its ratio over bare's.
type InstrCount struct {
	Config       string  `json:"config"`
	Instructions uint64  `json:"instructions"`
	Interpreter  uint64  `json:"interpreter_instructions,omitempty"` // of Instructions, the interpreter's own
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

// instructions counts w's instructions bare, under heaplens with no sample
// (the floor), at the default rate and, for a Python workload, under
// heaplens --no-python. One run each: the counts are deterministic enough
// (fixed seed, PYTHONHASHSEED=0).
func (b *bench) instructions(w *workload) (*InstrResult, error) {
	if b.peers.ValgrindReason != "" {
		b.warnings.Add("no instruction counts: " + b.peers.ValgrindReason)
		return nil, nil
	}
	cfgs := []config{cfgBare, cfgFloor, cfgHeaplens}
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
		m, err := b.runOnce(c, w, w.Small, c.Name == cfgHeaplens.Name)
		if err != nil {
			return nil, err
		}
		if m.capture != "" {
			doc, err := b.report(m.capture, "allocs")
			os.Remove(m.capture)
			if err != nil {
				return nil, err
			}
			res.Samples = doc.Total.Samples
		}
		res.Counts = append(res.Counts, InstrCount{Config: c.Name, Instructions: m.Instructions, Interpreter: m.Interpreter})
	}
	bare := float64(res.Counts[0].Instructions)
	for i := range res.Counts {
		res.Counts[i].Ratio = ratio(float64(res.Counts[i].Instructions), bare)
	}
	fc, hc := res.count(cfgFloor.Name), res.count(cfgHeaplens.Name)
	floor, hl := float64(fc.Instructions), float64(hc.Instructions)
	res.Floor, res.Sampling = ratio(floor, bare)-1, ratio(hl-floor, bare)
	res.PerSample = ratio(hl-floor, float64(res.Samples))
	if w.python {
		res.PerSampleApart = ratio((hl-float64(hc.Interpreter))-(floor-float64(fc.Interpreter)), float64(res.Samples))
	}
	apart := ""
	if w.python {
		apart = fmt.Sprintf("; %.0f with the interpreter's own left out", res.PerSampleApart)
	}
	logf("%s: floor %+.2f%%, sampling %+.3f%% (%d samples, %.0f instructions each%s)",
		w.Name, 100*res.Floor, 100*res.Sampling, res.Samples, res.PerSample, apart)
	return res, nil
}

// samplingGoal says whether a workload's sampling cost meets both goals.
func (r *InstrResult) samplingGoal() string {
	if r.Samples == 0 {
		return "no samples"
	}
	if r.Sampling <= goalSamplingFrac && r.PerSample <= goalPerSample {
		return "met"
	}
	return "**missed**"
}

func writeInstructions(sb *strings.Builder, r *Report) {
	if len(r.Instructions) == 0 {
		return
	}
	fmt.Fprintf(sb, "## Instructions: the in-process cost without the noise\n\n"+
		"The target's instructions under `valgrind --tool=callgrind` (heaplens' agent runs outside valgrind and is not "+
		"counted: its CPU is the \"other s\" column above), at the small size, one run each, `--seed 1`. These counts move "+
		"by well under 0.1 %% between runs, where wall time moves by ±10 %%. The floor is heaplens with a rate no run "+
		"reaches (`--rate 2^48`): the hooks and the countdown on every call, which any interposer pays (and, on Python, "+
		"pymalloc called out of line through the PEP 445 hooks). Sampling is the default rate's cost above the floor; "+
		"its goals: ≤ %s of bare's instructions and ≤ %d instructions per sample. On Python the interpreter's own count "+
		"(pymalloc's above all) moves by a few hundred thousand instructions with the address layout, which the "+
		"library's mappings change; \"interpreter apart\" leaves the interpreter's own instructions out of both runs.\n\n", pct(goalSamplingFrac), goalPerSample)
	var rows [][]string
	for _, in := range r.Instructions {
		row := []string{in.Workload, strings.Join(in.Args, " ")}
		for _, name := range []string{cfgBare.Name, cfgFloor.Name, cfgHeaplens.Name, cfgNoPy.Name} {
			c := in.count(name)
			if c == nil {
				row = append(row, "-", "-")
				continue
			}
			row = append(row, fmt.Sprintf("%.1f M", float64(c.Instructions)/1e6))
			if name != cfgBare.Name {
				row = append(row, fmt.Sprintf("%+.2f%%", 100*(c.Ratio-1)))
			}
		}
		apart := "-"
		if in.PerSampleApart != 0 {
			apart = fmt.Sprintf("%.0f", in.PerSampleApart)
		}
		row = append(row, fmt.Sprintf("%+.3f%%", 100*in.Sampling), fmt.Sprint(in.Samples), fmt.Sprintf("%.0f", in.PerSample), apart, in.samplingGoal())
		rows = append(rows, row)
	}
	sb.WriteString(harness.Table([]string{"workload", "args", ">bare", ">floor", ">added", ">heaplens", ">added",
		">heaplens --no-python", ">added", ">sampling", ">samples", ">per sample", ">per sample, interpreter apart", "goal"}, rows))
	sb.WriteString("\n")
}
