package compare

import (
	"fmt"
	"math"
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
	// Layouts are the sampling figures of each layout counted, of which
	// Samples, Sampling, PerSample and PerSampleApart are the medians.
	Layouts []LayoutCount `json:"layouts,omitempty"`
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

// layoutRings are the ring sizes of the layouts after the first (the
// default size). What the process maps after its ring (pymalloc's arenas
// above all) lands elsewhere with each, and the interpreter's own count
// follows the addresses: py_server's json encoder keys a dict by id(),
// whose probes took 1.3 M more instructions at the default rate than at
// the floor with the default ring, 0.08 M more with a 1 MiB one, while
// the library's later mappings still moved the arenas (preload/reserve.c
// ended that). Whole MiB, they leave an arena's offset in its 1 MiB span
// (which CPython's arena check's cost follows) as it is.
var layoutRings = []string{"1MiB", "4MiB", "32MiB", "2MiB", "8MiB", "64MiB"}

// LayoutCount is the sampling cost counted in one address layout: the
// floor's and the default rate's runs with one ring size.
type LayoutCount struct {
	Ring           string  `json:"ring_size"` // "" for the default
	Samples        int     `json:"samples"`
	Sampling       float64 `json:"sampling_frac"`
	PerSample      float64 `json:"sampling_per_sample"`
	PerSampleApart float64 `json:"sampling_per_sample_interpreter_apart,omitempty"`
}

// instructions counts w's instructions bare, under heaplens with no sample
// (the floor), at the default rate and, for a Python workload, under
// heaplens --no-python. One run each: the counts are deterministic enough
// (fixed seed, PYTHONHASHSEED=0). A Python workload's floor and default
// rate are counted in b.o.Layouts layouts: pymalloc's count there follows
// where objects land by 2-3 k instructions per sample, so its figures are
// the layouts' medians.
func (b *bench) instructions(w *workload) (*InstrResult, error) {
	if b.peers.ValgrindReason != "" {
		b.warnings.Add("no instruction counts: " + b.peers.ValgrindReason)
		return nil, nil
	}
	layouts := 1
	if w.python && b.o.Layouts > 1 {
		layouts = min(b.o.Layouts, 1+len(layoutRings))
	}
	cfgs := []config{cfgBare, cfgFloor, cfgHeaplens}
	for _, ring := range layoutRings[:layouts-1] {
		floor, hl := cfgFloor, cfgHeaplens
		floor.ring, hl.ring = ring, ring
		cfgs = append(cfgs, floor, hl)
	}
	if w.python {
		cfgs = append(cfgs, cfgNoPy)
	}
	for i := range cfgs {
		cfgs[i].callgrind = true
		if cfgs[i].profiler == "heaplens" {
			cfgs[i].seed = 1 // the same samples every run
		}
	}
	logf("%s %s: instructions under callgrind (%d layouts)", w.Name, strings.Join(w.Small, " "), layouts)
	res := &InstrResult{Workload: w.Name, Args: w.Small}
	var floor InstrCount
	for _, c := range cfgs {
		m, err := b.runOnce(c, w, w.Small, c.Name == cfgHeaplens.Name)
		if err != nil {
			return nil, err
		}
		n := InstrCount{Config: c.Name, Instructions: m.Instructions, Interpreter: m.Interpreter}
		if c.ring == "" {
			res.Counts = append(res.Counts, n) // the table's columns: the default ring's
		}
		switch c.Name {
		case cfgFloor.Name:
			floor = n
		case cfgHeaplens.Name:
			doc, err := b.report(m.capture, "allocs")
			os.Remove(m.capture)
			if err != nil {
				return nil, err
			}
			res.Layouts = append(res.Layouts, layoutCost(c.ring, doc.Total.Samples, res.Counts[0], floor, n, w.python))
		}
	}
	bare := float64(res.Counts[0].Instructions)
	for i := range res.Counts {
		res.Counts[i].Ratio = ratio(float64(res.Counts[i].Instructions), bare)
	}
	res.Floor = res.count(cfgFloor.Name).Ratio - 1
	res.medians()
	apart := ""
	if w.python {
		apart = fmt.Sprintf("; %.0f with the interpreter's own left out", res.PerSampleApart)
	}
	logf("%s: floor %+.2f%%, sampling %+.3f%% (%d samples, %.0f instructions each%s; medians of %d layouts, per sample %s)",
		w.Name, 100*res.Floor, 100*res.Sampling, res.Samples, res.PerSample, apart, len(res.Layouts), res.perSampleRange())
	return res, nil
}

// layoutCost is the sampling cost in one layout: the default rate's run hl
// above the floor's, over bare's count and per sample.
func layoutCost(ring string, samples int, bare, floor, hl InstrCount, python bool) LayoutCount {
	l := LayoutCount{Ring: ring, Samples: samples}
	added := float64(hl.Instructions) - float64(floor.Instructions)
	l.Sampling = ratio(added, float64(bare.Instructions))
	l.PerSample = ratio(added, float64(samples))
	if python {
		l.PerSampleApart = ratio(added-(float64(hl.Interpreter)-float64(floor.Interpreter)), float64(samples))
	}
	return l
}

// medians sets the sampling figures to their medians over the layouts.
func (r *InstrResult) medians() {
	var samples, sampling, per, apart []float64
	for _, l := range r.Layouts {
		samples = append(samples, float64(l.Samples))
		sampling = append(sampling, l.Sampling)
		per = append(per, l.PerSample)
		apart = append(apart, l.PerSampleApart)
	}
	r.Samples = int(math.Round(harness.Median(samples)))
	r.Sampling, r.PerSample, r.PerSampleApart = harness.Median(sampling), harness.Median(per), harness.Median(apart)
}

// perSampleRange is the per-sample figure's range over the layouts.
func (r *InstrResult) perSampleRange() string {
	if len(r.Layouts) < 2 {
		return "-"
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range r.Layouts {
		lo, hi = math.Min(lo, l.PerSample), math.Max(hi, l.PerSample)
	}
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
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
		"(pymalloc's above all) moves by a few hundred thousand instructions with the address layout (a dict keyed by "+
		"id() probes more or less), which the floor's and the default rate's runs share (the library's later mappings go "+
		"into a range reserved at start-up): a Python workload's floor and default rate "+
		"are counted in several layouts (heaplens' ring at its default size, then at 1, 4, 32… MiB, which moves what is "+
		"mapped after it), and its sampling figures and verdict are the layouts' medians (\"layouts\": the per-sample "+
		"range); \"interpreter apart\" leaves the interpreter's own instructions out of both runs.\n\n", pct(goalSamplingFrac), goalPerSample)
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
		row = append(row, fmt.Sprintf("%+.3f%%", 100*in.Sampling), fmt.Sprint(in.Samples), fmt.Sprintf("%.0f", in.PerSample),
			in.perSampleRange(), apart, in.samplingGoal())
		rows = append(rows, row)
	}
	sb.WriteString(harness.Table([]string{"workload", "args", ">bare", ">floor", ">added", ">heaplens", ">added",
		">heaplens --no-python", ">added", ">sampling", ">samples", ">per sample", ">per sample, layouts", ">per sample, interpreter apart", "goal"}, rows))
	sb.WriteString("\n")
}
