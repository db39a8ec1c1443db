package compare

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

// Report is everything one invocation measured; compare.json is this.
type Report struct {
	harness.Stamp
	Heaplens  string           `json:"heaplens"`
	Peers     peers.Peers      `json:"peers"`
	Rate      uint64           `json:"rate"`
	Goals     Goals            `json:"goals"`
	Startup   []StartupResult  `json:"startup"`
	Workloads []WorkloadResult `json:"workloads"`
	Accuracy  []AccuracyResult `json:"accuracy"`
	// Instructions are the targets' instruction counts under callgrind.
	Instructions []InstrResult `json:"instructions,omitempty"`
	Scale        *ScaleResult  `json:"scale,omitempty"`
	// Exact is --rate 1 against memray's like-for-like mode.
	Exact    []ExactResult `json:"exact,omitempty"`
	Verdicts []Verdict     `json:"verdicts"`
}

// Goals are the targets.
type Goals struct {
	Wall    float64 `json:"wall_ratio"`       // heaplens default rate over bare
	Capture float64 `json:"capture_fraction"` // heaplens capture over memray's
	Sigmas  float64 `json:"sigmas"`           // estimate errors within this many σ
}

// Verdict is one workload against the goals.
type Verdict struct {
	Workload string           `json:"workload"`
	Python   bool             `json:"python"`
	Wall     harness.Interval `json:"wall_ratio"`
	// WallGoal is "met" when the whole interval is within the goal, "missed"
	// when all of it is above, "undecided" when the machine's noise in
	// this many rounds cannot tell.
	WallGoal string `json:"wall_goal"`
	// Instr is the target's instructions under heaplens over bare's (0
	// when not counted).
	Instr float64 `json:"instructions_ratio,omitempty"`
	// CaptureFrac is heaplens' capture over memray's; 0 when memray does
	// not apply (native workloads) or is unavailable.
	CaptureFrac float64 `json:"capture_fraction,omitempty"`
	CaptureOK   *bool   `json:"capture_ok,omitempty"`
	// CaptureFracT is over memray --trace-python-allocators (like for like).
	CaptureFracT float64 `json:"capture_fraction_trace_python_allocators,omitempty"`
	Sites        int     `json:"sites"`
	SitesWithin  int     `json:"sites_within"`
	AccuracyOK   bool    `json:"accuracy_ok"`
}

// evaluate fills r.Verdicts.
func (r *Report) evaluate() {
	r.Verdicts = nil
	for _, w := range r.Workloads {
		v := Verdict{Workload: w.Name, Python: w.Kind == "python"}
		if hl := w.Config(cfgHeaplens.Name); hl != nil {
			v.Wall = hl.WallCI
			v.WallGoal = goal(hl.WallCI, r.Goals.Wall)
			if hl.CaptureVsMemray > 0 {
				v.CaptureFrac = hl.CaptureVsMemray
				ok := v.CaptureFrac <= r.Goals.Capture
				v.CaptureOK = &ok
			}
			v.CaptureFracT = hl.CaptureVsMemrayT
		}
		for _, in := range r.Instructions {
			if c := in.count(cfgHeaplens.Name); in.Workload == w.Name && c != nil {
				v.Instr = c.Ratio
			}
		}
		for _, a := range r.Accuracy {
			if a.Workload != w.Name {
				continue
			}
			for _, s := range a.Sites {
				v.Sites++
				if s.Within {
					v.SitesWithin++
				}
			}
		}
		v.AccuracyOK = v.Sites > 0 && v.SitesWithin == v.Sites
		r.Verdicts = append(r.Verdicts, v)
	}
}

// goal says whether a ratio's interval is within limit.
func goal(iv harness.Interval, limit float64) string {
	switch {
	case iv.Conf > 0 && iv.Hi <= limit:
		return "met"
	case iv.Conf > 0 && iv.Lo > limit:
		return "missed"
	}
	return "undecided"
}

// Calibration counts, over every (site, seed) estimate, how many errors
// fall within 1, 2 and 3 predicted σ (a normal error would give 68.3 %,
// 95.4 % and 99.7 %).
type Calibration struct {
	N                         int
	Within1, Within2, Within3 int
}

func calibrate(accs []AccuracyResult) Calibration {
	var c Calibration
	for _, a := range accs {
		for _, s := range a.Sites {
			if s.Sigma == 0 {
				continue
			}
			for _, z := range s.Z {
				c.N++
				az := math.Abs(z)
				if az <= 1 {
					c.Within1++
				}
				if az <= 2 {
					c.Within2++
				}
				if az <= 3 {
					c.Within3++
				}
			}
		}
	}
	return c
}

// MarshalJSON replaces NaN and ±Inf, which JSON cannot hold, by 0.
func (s SiteAccuracy) MarshalJSON() ([]byte, error) {
	type plain SiteAccuracy
	p := plain(s)
	p.MaxAbsZ = harness.Finite(p.MaxAbsZ)
	p.Z = append([]float64(nil), p.Z...)
	for i := range p.Z {
		p.Z[i] = harness.Finite(p.Z[i])
	}
	return json.Marshal(p)
}

// times prints a ratio as "1.03×".
func times(x float64) string {
	if x == 0 {
		return "-"
	}
	if x >= 10 {
		return fmt.Sprintf("%.0f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// interval prints a ratio's confidence interval as "0.98–1.10 (94 %)".
func interval(iv harness.Interval) string {
	if iv.Conf == 0 {
		return fmt.Sprintf("%.2f–%.2f (range)", iv.Lo, iv.Hi)
	}
	return fmt.Sprintf("%.2f–%.2f (%.0f %%)", iv.Lo, iv.Hi, 100*iv.Conf)
}

func pct(x float64) string {
	if math.Abs(x) < 0.001 {
		return fmt.Sprintf("%.3f%%", 100*x)
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func na(reason string) string {
	if len(reason) > 60 {
		reason = reason[:57] + "…"
	}
	return "n/a (" + reason + ")"
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**NO**"
}

// overheadColumns are the configurations of the summary matrix.
var overheadColumns = []string{cfgHeaplens.Name, cfgRate1.Name, cfgNoPy.Name, cfgHeaptrack.Name, cfgMemray.Name, cfgMemrayN.Name, cfgMemrayA.Name, cfgMemrayT.Name}

func formatMarkdown(r *Report) string {
	var sb strings.Builder
	sb.WriteString(r.Header("heaplens against a bare run and against peers", ""))
	p := r.Peers
	fmt.Fprintf(&sb, "\n\n%s · CPython %s · numpy %s · heaptrack %s · memray %s · sqlite3 %s · g++ %s\n\n",
		r.Heaplens, p.Python, p.Numpy, orNA(p.Heaptrack, p.HeaptrackReason), orNA(p.Memray, p.MemrayReason),
		orNA(p.Sqlite, p.SqliteReason), orNA(p.Cxx, p.CxxReason))
	writeGoals(&sb, r)
	writeOverview(&sb, r)
	writeInstructions(&sb, r)
	writeExact(&sb, r)
	writeAccuracy(&sb, r)
	writeScale(&sb, r)
	writeStartup(&sb, r)
	writeDetails(&sb, r)
	sb.WriteString(harness.Bullets("Notes", notes(r)))
	sb.WriteString(harness.Bullets("Warnings", r.Warnings))
	return sb.String()
}

func orNA(v, reason string) string {
	if v != "" {
		return v
	}
	return na(reason)
}

func writeGoals(sb *strings.Builder, r *Report) {
	fmt.Fprintf(sb, "## Goals\n\nheaplens at its default rate: wall ≤ %.2f× bare on every workload; capture ≤ %s of memray's "+
		"(default mode, Python workloads: memray runs Python programs only); every site's estimate within %.0f σ of the exact "+
		"value (σ predicted by the sampling math).\n\n"+
		"wall = the median over rounds of heaplens' wall time over bare's in the same round; interval = the confidence "+
		"interval of that median from the order statistics of the rounds' ratios (exact coverage in brackets, whatever the "+
		"noise's distribution). The wall goal is *met* when the whole interval is within it, *missed* when all of it is "+
		"above, *undecided* when this machine's noise over this many rounds cannot tell. instructions = the target's own "+
		"instructions under callgrind over bare's (section \"Instructions\"): the in-process cost, free of that noise.\n\n",
		r.Goals.Wall, pct(r.Goals.Capture), r.Goals.Sigmas)
	var rows [][]string
	for _, v := range r.Verdicts {
		capCell, capOK, capT := "n/a (native)", "-", "-"
		if v.Python {
			capCell = "n/a (memray not run)"
		}
		if v.CaptureOK != nil {
			capCell, capOK = pct(v.CaptureFrac), yesNo(*v.CaptureOK)
		}
		if v.CaptureFracT > 0 {
			capT = pct(v.CaptureFracT)
		}
		sites, acc := fmt.Sprintf("%d / %d", v.SitesWithin, v.Sites), yesNo(v.AccuracyOK)
		if v.Sites == 0 {
			sites, acc = "-", "not run"
		}
		wallGoal := v.WallGoal
		if wallGoal == "missed" {
			wallGoal = "**missed**"
		}
		instr := "-"
		if v.Instr > 0 {
			instr = fmt.Sprintf("%.3f×", v.Instr)
		}
		rows = append(rows, []string{v.Workload, times(v.Wall.Median), interval(v.Wall), wallGoal, instr, capCell, capOK, capT, sites, acc})
	}
	sb.WriteString(harness.Table([]string{"workload", ">wall", ">interval", fmt.Sprintf("≤ %.2f×", r.Goals.Wall), ">instructions", ">capture / memray's",
		"≤ " + pct(r.Goals.Capture), ">… / memray --trace-python-allocators'", ">sites within", "accurate"}, rows))
	sb.WriteString("\n")
}

func writeOverview(sb *strings.Builder, r *Report) {
	fmt.Fprintf(sb, "## Overhead: wall time over bare\n\nThe median over rounds of the wall time over bare's in the same round "+
		"(the rounds run every configuration once, in a rotated order). "+
		"`--rate 1` runs at the small size (its cost grows with the number of allocations), against bare at that size.\n\n")
	head := []string{"workload", ">bare s"}
	for _, c := range overheadColumns {
		head = append(head, ">"+c)
	}
	var rows, caps, cpus [][]string
	for _, w := range r.Workloads {
		bare := w.Config(cfgBare.Name)
		row := []string{w.Name, harness.F2(bare.WallS)}
		capRow := []string{w.Name}
		cpuRow := []string{w.Name, harness.F2(bare.CPUS)}
		for _, name := range overheadColumns {
			c := w.Config(name)
			switch {
			case c == nil:
				row, capRow, cpuRow = append(row, "-"), append(capRow, "-"), append(cpuRow, "-")
			case c.Unavailable != "":
				row, capRow, cpuRow = append(row, na(c.Unavailable)), append(capRow, "n/a"), append(cpuRow, "n/a")
			default:
				row = append(row, times(c.WallRatio))
				capRow = append(capRow, harness.ByteLabel(c.Capture))
				cpuRow = append(cpuRow, times(c.CPURatio))
			}
		}
		rows, caps, cpus = append(rows, row), append(caps, capRow), append(cpus, cpuRow)
	}
	sb.WriteString(harness.Table(head, rows))
	sb.WriteString("\n### CPU time over bare (whole process tree: target, agent, helpers)\n\n")
	cpuHead := append([]string{"workload", ">bare cpu s"}, head[2:]...)
	sb.WriteString(harness.Table(cpuHead, cpus))
	sb.WriteString("\n### Where the CPU goes: the target's own CPU over bare's, and the rest of the tree\n\n" +
		"target × = the target process's own CPU time (printed by the workload) over bare's: the profiler's in-process cost. " +
		"other s = the tree's CPU minus the target's: heaplens' agent, heaptrack's interpreter process (memray works inside " +
		"the target).\n\n")
	var split [][]string
	splitCols := []string{cfgHeaplens.Name, cfgNoPy.Name, cfgHeaptrack.Name, cfgMemray.Name, cfgMemrayT.Name}
	splitHead := []string{"workload", ">bare target cpu s"}
	for _, c := range splitCols {
		splitHead = append(splitHead, ">"+c+": target ×", ">other s")
	}
	for _, w := range r.Workloads {
		row := []string{w.Name, harness.F2(w.Config(cfgBare.Name).TargetCPUS)}
		for _, name := range splitCols {
			c := w.Config(name)
			if c == nil || c.Unavailable != "" || c.TargetCPUS == 0 {
				row = append(row, "n/a", "n/a")
				continue
			}
			row = append(row, times(c.TargetCPURatio), harness.F2(c.OtherCPUS))
		}
		split = append(split, row)
	}
	sb.WriteString(harness.Table(splitHead, split))
	sb.WriteString("\n### Capture size\n\n")
	sb.WriteString(harness.Table(append([]string{"workload"}, head[2:]...), caps))
	sb.WriteString("\n")
}

func writeAccuracy(sb *strings.Builder, r *Report) {
	if len(r.Accuracy) == 0 {
		return
	}
	fmt.Fprintf(sb, "## Accuracy at the default rate (%s)\n\n", harness.ByteLabel(float64(r.Rate)))
	sb.WriteString("Each workload at its small size: one `--rate 1` run gives the exact bytes of each site; runs at the default rate " +
		"with `--seed 1…N` give the estimates. σ is the standard deviation the sampling math predicts for the site " +
		"(`heap.Stddev` over the exact run's allocation sizes of the site: all of them for allocs, those live at the exact peak for " +
		"peak, at exit for leaks). A site is the innermost frame in the workload's own code (for sqlite3: the innermost named " +
		"function of libsqlite3 that is not an allocation wrapper). The peak total is the estimated peak heap against the exact one: " +
		"a maximum over time, so a little above the live-set estimate on average.\n\n")
	cal := calibrate(r.Accuracy)
	if cal.N > 0 {
		fmt.Fprintf(sb, "Calibration over all %d estimates with σ > 0: %s within 1σ (normal: 68.3%%), %s within 2σ (95.4%%), %s within 3σ (99.7%%).\n\n",
			cal.N, pct(float64(cal.Within1)/float64(cal.N)), pct(float64(cal.Within2)/float64(cal.N)), pct(float64(cal.Within3)/float64(cal.N)))
	}
	for _, a := range r.Accuracy {
		fmt.Fprintf(sb, "### %s %s (seeds %s)\n\n", a.Workload, strings.Join(a.Args, " "), seedList(a.Seeds))
		if a.RefRingSize != "" {
			fmt.Fprintf(sb, "The `--rate 1` run dropped %d records with the default 16 MiB ring; the reference was rerun with `--ring-size %s`.\n\n", a.RefDrops, a.RefRingSize)
		} else if a.RefDrops > 0 {
			fmt.Fprintf(sb, "The `--rate 1` reference dropped %d records: its values are not exact.\n\n", a.RefDrops)
		}
		if a.Note != "" {
			sb.WriteString(a.Note + "\n\n")
		}
		var rows [][]string
		for _, s := range a.Sites {
			exp := ""
			if s.Expected > 0 {
				exp = "= " + s.How
				if !s.ExactOK {
					exp = fmt.Sprintf("**≠** %s = %.0f", s.How, s.Expected)
				}
			}
			rows = append(rows, []string{s.View, shortSite(s.Site), fmt.Sprintf("%.0f", s.Exact), pct(ratio(s.Sigma, s.Exact)),
				pct(s.MeanAbsRel), signedPcts(s.RelErr), harness.F2(s.MaxAbsZ), yesNo(s.Within), exp})
		}
		sb.WriteString(harness.Table([]string{"view", "site", ">exact bytes", ">σ / exact", ">mean |error|", "errors per seed",
			">max |error|/σ", fmt.Sprintf("≤ %.0fσ", r.Goals.Sigmas), "exact = arithmetic"}, rows))
		sb.WriteString("\n")
	}
}

func seedList(s []uint64) string {
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d…%d", s[0], s[len(s)-1])
}

func signedPcts(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%+.0f", 100*x))
	}
	return strings.Join(parts, " ") + " %"
}

func writeScale(sb *strings.Builder, r *Report) {
	s := r.Scale
	if s == nil {
		return
	}
	sb.WriteString("## Scale\n\n### Agent throughput (malloc_pairs 64 B at `--rate 1`, default 16 MiB ring per process)\n\n")
	var rows [][]string
	for _, t := range s.Throughput {
		rows = append(rows, []string{fmt.Sprint(t.Threads), fmt.Sprint(t.Iters), harness.F2(t.LoopS), fmt.Sprintf("%.0f", t.RecordsPS),
			fmt.Sprint(t.Dropped), pct(t.DropFrac), harness.F2(t.AgentCPUS), harness.F2(t.AgentUsPerRec), fmt.Sprintf("%.0f", t.AgentCapacity),
			harness.ByteLabel(float64(t.CaptureBytes))})
	}
	sb.WriteString(harness.Table([]string{">threads", ">pairs per thread", ">loop s", ">records/s", ">dropped", ">dropped %",
		">agent CPU s", ">agent µs/record", ">records per agent CPU s", ">capture"}, rows))
	sb.WriteString("\nrecords = sampled allocations + frees recorded; records/s over the allocating loop's time. agent CPU = " +
		"CPU of the whole tree − the target's own (getrusage in the workload).\n\n")
	rt := s.Report
	fmt.Fprintf(sb, "### Report time on a synthetic capture\n\n%d samples (%d live at the end, %d frees), %d stacks of 24 frames over "+
		"%d locations, %s on disk, written in %.1f s with internal/capture's Writer.\n\n", rt.Samples, rt.Live, rt.Samples-rt.Live,
		rt.Stacks, rt.Locations, harness.ByteLabel(float64(rt.CaptureBytes)), rt.WriteS)
	rows = nil
	for _, run := range rt.Runs {
		rows = append(rows, []string{"heaplens report " + run.Args, harness.F1(run.WallS), harness.F1(run.CPUS), harness.ByteLabel(float64(run.RSSKB) * 1024),
			harness.ByteLabel(float64(run.Output))})
	}
	sb.WriteString(harness.Table([]string{"command", ">wall s", ">cpu s", ">peak RSS", ">output"}, rows))
	if len(rt.Stages) > 0 {
		sb.WriteString("\nThe same work in-process, by stage (seconds):")
		for _, k := range []string{"load", "compute peak (one replay: peak and timeline)", "render text", "render json"} {
			if v, ok := rt.Stages[k]; ok {
				fmt.Fprintf(sb, " %s %.1f;", k, v)
			}
		}
		sb.WriteString("\n")
	}
	if rt.Profile != "" {
		sb.WriteString("\nCPU profile of the in-process report (`go tool pprof -top -cum`, bench/results/report-profile.pprof):\n\n```\n" + rt.Profile + "\n```\n")
	}
	sb.WriteString("\n")
}

func writeStartup(sb *strings.Builder, r *Report) {
	if len(r.Startup) == 0 {
		return
	}
	sb.WriteString("## Start-up: the fixed cost of `heaplens run`\n\nWarm: the library and the symbol cache are in the user " +
		"cache directory (every run after the first). Cold: an empty `XDG_CACHE_HOME`, as on a machine's first run (the library " +
		"is extracted, libc's separate debug file is decompressed and indexed).\n\n")
	var rows [][]string
	for _, s := range r.Startup {
		for _, c := range s.Configs {
			rows = append(rows, []string{s.Program, c.Config, fmt.Sprintf("%.0f", 1000*c.WallS), fmt.Sprintf("%.0f", 1000*c.CPUS),
				harness.ByteLabel(c.TreeRSSKB * 1024)})
		}
	}
	sb.WriteString(harness.Table([]string{"program", "config", ">wall ms", ">cpu ms", ">largest RSS"}, rows))
	sb.WriteString("\n")
}

func writeDetails(sb *strings.Builder, r *Report) {
	sb.WriteString("## Per workload\n\ntarget RSS: the workload's own peak (VmHWM, printed by it: with the profiler's in-process " +
		"part, without its agent). largest RSS: GNU time's %M, the largest peak of any one process of the tree — for heaplens " +
		"max(agent, target), for heaptrack max(heaptrack_interpret, target). When it exceeds the target's, it is the agent's.\n\n")
	for _, w := range r.Workloads {
		fmt.Fprintf(sb, "### %s (%s)\n\n%s. Full size: `%s`; small size: `%s`.\n\n", w.Name, w.Kind, w.Desc,
			strings.Join(w.Full, " "), strings.Join(w.Small, " "))
		var rows [][]string
		for _, group := range [][]ConfigResult{w.Configs, w.SmallConfigs} {
			for _, c := range group {
				size := "full"
				if strings.Join(c.Args, " ") != strings.Join(w.Full, " ") {
					size = "small"
				}
				if c.Unavailable == "Python only" {
					continue // said once in the overview
				}
				if c.Unavailable != "" {
					rows = append(rows, []string{c.Config, size, na(c.Unavailable)})
					continue
				}
				rows = append(rows, []string{c.Config, size, harness.F2(c.WallS), times(c.WallRatio), interval(c.WallCI), harness.F2(c.CPUS), times(c.CPURatio),
					times(c.TargetCPURatio), harness.F2(c.OtherCPUS), harness.ByteLabel(c.SelfRSSKB * 1024), harness.ByteLabel(c.TreeRSSKB * 1024),
					captureCell(c.Capture)})
			}
		}
		sb.WriteString(harness.Table([]string{"config", "size", ">wall s", ">wall ×", ">interval", ">cpu s", ">cpu ×", ">target cpu ×", ">other cpu s",
			">target RSS", ">largest RSS", ">capture"}, rows))
		sb.WriteString("\n")
	}
}

func captureCell(n float64) string {
	if n == 0 {
		return "-"
	}
	return harness.ByteLabel(n)
}

// notes explain what the columns measured.
func notes(r *Report) []string {
	return []string{
		"wall = the harness clock from start to reaped: interpreter start-up, heaplens' agent start and the capture's final " +
			"write, heaptrack's and memray's work at exit all count.",
		"cpu = user+sys from wait4's rusage of GNU time, which includes every process of the tree that was reaped: heaplens' " +
			"agent, heaptrack_interpret, the target.",
		"heaplens runs at its default rate (512 KiB mean between samples), with Python frames and PyMem hooks on (its default). " +
			"heaptrack records every malloc-family call with its native stack (Debian's 1.4, default mode). memray records every " +
			"allocation that reaches malloc: default mode (Python stacks), --native (adds native stacks), --aggregate (keeps only " +
			"aggregates in the file); pymalloc's objects only with --trace-python-allocators, which is what heaplens' PyMem " +
			"hooks sample (so that mode is the like-for-like capture). memray runs Python programs only: n/a on native workloads.",
		"Python workloads run on Debian's /usr/bin/python3 through the venv " + r.Peers.Venv + " (--system-site-packages, so " +
			"Debian's numpy), with PYTHONHASHSEED=0. Every workload prints a checksum, compared across all runs and profilers.",
		"Peers not measured: valgrind's massif (20–100× slower: it would take this run past its time budget), tracemalloc " +
			"(keeps no capture unless the program asks for snapshots).",
	}
}
