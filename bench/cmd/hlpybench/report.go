package main

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// Report is everything one invocation measured; python.json is this.
type Report struct {
	Date      string           `json:"date"`
	Machine   harness.Machine  `json:"machine"`
	Peers     Peers            `json:"peers"`
	Runs      int              `json:"runs"`
	Quick     bool             `json:"quick"`
	Rate      uint64           `json:"rate"`
	Goal      float64          `json:"goal_ratio"`
	Seconds   float64          `json:"seconds"`
	Samples   []SampleResult   `json:"per_sample"`
	Workloads []WorkloadResult `json:"workloads"`
	Notes     []string         `json:"notes"`
	Warnings  []string         `json:"warnings,omitempty"`
}

// MarshalJSON replaces NaN and ±Inf (a median of nothing, a ratio over 0),
// which JSON cannot hold, by 0.
func (c ConfigResult) MarshalJSON() ([]byte, error) {
	type plain ConfigResult
	p := plain(c)
	for _, x := range []*float64{&p.WallS, &p.CPUS, &p.LoopS, &p.TreeRSSKB, &p.SelfRSSKB, &p.Capture, &p.WallRatio, &p.CPURatio} {
		*x = finite(*x)
	}
	return json.Marshal(p)
}

// MarshalJSON: see ConfigResult.MarshalJSON.
func (r SampleResult) MarshalJSON() ([]byte, error) {
	type plain SampleResult
	p := plain(r)
	for _, x := range []*float64{&p.AllocsPerIt, &p.PerSampleUs, &p.NoPyUs, &p.WallUs} {
		*x = finite(*x)
	}
	return json.Marshal(p)
}

func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

func sortFloats(xs []float64) { sort.Float64s(xs) }

// byteLabel prints n bytes in the largest binary unit that keeps it ≥ 1.
func byteLabel(n float64) string {
	switch {
	case n >= 1<<30:
		return f1(n/(1<<30)) + " GiB"
	case n >= 1<<20:
		return f1(n/(1<<20)) + " MiB"
	case n >= 1<<10:
		return f1(n/(1<<10)) + " KiB"
	}
	return strconv.FormatFloat(n, 'f', 0, 64) + " B"
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

// notes explain what the columns measured.
func notes(p *Peers) []string {
	n := []string{
		"wall = the harness clock from start to reaped, so it includes interpreter start-up, heaplens' agent start " +
			"and the capture's final write, and memray's file compression at exit.",
		"cpu = user+sys from wait4's rusage of the process the harness started: the child plus every descendant it " +
			"reaped, so under heaplens the agent's and the target's CPU both count.",
		"tree RSS = /usr/bin/time's %M, wait4's ru_maxrss of the command: the largest peak RSS of any one process of " +
			"the tree (under heaplens the larger of the agent and the target, not their sum). self RSS = the Python " +
			"process's own peak, printed by the workload (VmHWM of /proc/self/status; ru_maxrss would not do: a child " +
			"started from a Go process keeps the parent's peak across exec), which includes what the profiler keeps inside it (heaplens' ring pages " +
			"touched, memray's tracker).",
		"heaplens runs at its default rate (512 KiB mean between samples) and, by default, hooks the PyMem MEM and OBJ " +
			"domains so that pymalloc's objects are sampled too and walks the Python frames at each sample; " +
			"--no-python does neither (native stacks only, pymalloc's arenas are seen as 256 KiB mallocs). " +
			"memray records every allocation (no sampling); by default it does not trace pymalloc's objects " +
			"(--trace-python-allocators, not used here, would); --native adds native stacks.",
		"Every workload runs on Debian's /usr/bin/python3 through the venv " + p.Venv + " (--system-site-packages, " +
			"so Debian's numpy), with PYTHONHASHSEED=0; each prints a checksum, compared across all runs.",
		"py_deep allocates bytes objects of SIZE bytes (> 512: pymalloc hands them to malloc, so --no-python samples " +
			"them too) in a loop that allocates nothing else; frames are counted in a --native-python-internals capture.",
	}
	if p.MemrayReason != "" {
		n = append(n, "memray unavailable: "+p.MemrayReason)
	}
	return n
}

func formatMarkdown(r Report) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# heaplens Python overhead\n\n")
	fmt.Fprintf(&sb, "%s · nproc %d · %s · kernel %s · %s · %s · %d runs per configuration (median)",
		r.Date, r.Machine.CPUs, r.Machine.CPU, r.Machine.Kernel, r.Machine.Glibc, r.Machine.Go, r.Runs)
	if r.Quick {
		sb.WriteString(" · QUICK (smoke test, not for quoting)")
	}
	fmt.Fprintf(&sb, " · %.0f s\n\n", r.Seconds)
	fmt.Fprintf(&sb, "CPython %s · numpy %s · memray %s\n\n", r.Peers.Python, r.Peers.Numpy, orDash(r.Peers.Memray))

	for _, w := range r.Workloads {
		fmt.Fprintf(&sb, "## %s %s (end to end; goal: heaplens ≤ %.2f× bare wall time)\n\n", w.Name, strings.Join(w.Args, " "), r.Goal)
		var rows [][]string
		for _, c := range w.Configs {
			if c.Unavailable != "" {
				rows = append(rows, []string{c.Config, "unavailable: " + c.Unavailable})
				continue
			}
			within := ""
			if strings.HasPrefix(c.Config, "heaplens") && c.Config != "bare" {
				within = "yes"
				if !c.WithinGoal {
					within = "NO"
				}
			}
			capture := "-"
			if c.Capture > 0 {
				capture = byteLabel(c.Capture)
			}
			rows = append(rows, []string{c.Config, f2(c.WallS), f3(c.WallRatio), f2(c.LoopS), f2(c.CPUS), f3(c.CPURatio),
				byteLabel(c.TreeRSSKB * 1024), byteLabel(c.SelfRSSKB * 1024), capture, within})
		}
		sb.WriteString(harness.Table([]string{"config", ">wall s", ">wall ratio", ">loop s", ">cpu s", ">cpu ratio",
			">tree RSS", ">self RSS", ">capture", "≤ goal"}, rows))
		sb.WriteString("\n")
	}

	if len(r.Samples) > 0 {
		sb.WriteString("## Per-sample cost (py_deep: heaplens run --rate 1 vs bare; ALLOC record with native+Python stack + FREE record)\n\n")
		var rows [][]string
		for _, s := range r.Samples {
			rows = append(rows, []string{strconv.Itoa(s.Levels), fmt.Sprintf("%d = %d + %d", s.Frames(), s.NativeFrames, s.PythonFrames),
				strconv.Itoa(s.N), f1(harness.Median(s.BareNs)), f1(harness.Median(s.Rate1Ns)), f2(s.PerSampleUs),
				f1(harness.Median(s.Rate1NoPyNs)), f2(s.NoPyUs), f2(s.WallUs)})
		}
		sb.WriteString(harness.Table([]string{">levels", ">frames (native + Python)", ">N", ">bare ns/alloc", ">rate 1 ns/alloc",
			">µs per sample", ">rate 1 --no-python ns/alloc", ">--no-python µs", ">µs by wall"}, rows))
		if n := len(r.Samples); n >= 2 {
			a, b := r.Samples[0], r.Samples[n-1]
			if d := b.Frames() - a.Frames(); d != 0 {
				fmt.Fprintf(&sb, "\nSlope: %.0f ns per frame (%d → %d frames); --no-python: %.0f ns per native frame.\n",
					(b.PerSampleUs-a.PerSampleUs)*1000/float64(d), a.Frames(), b.Frames(),
					(b.NoPyUs-a.NoPyUs)*1000/float64(b.NativeFrames-a.NativeFrames))
			}
		}
		sb.WriteString("\nµs per sample = (median rate-1 loop ns/alloc − median bare) / sampled allocations per iteration " +
			"(1, checked in a capture), timed inside the loop; --no-python samples the same allocations with the native " +
			"stack only; by wall = (median rate-1 wall − median bare wall) / N, start-up and exit included.\n")
	}
	sb.WriteString(harness.Bullets("Notes", r.Notes))
	sb.WriteString(harness.Bullets("Warnings", r.Warnings))
	return sb.String()
}
