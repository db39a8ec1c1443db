package compare

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

// PyReport is everything hlbench python measured; python.json is this.
type PyReport struct {
	harness.Stamp
	Python  string         `json:"python"`
	Samples []SampleResult `json:"per_sample"`
	// Instructions is callgrind's count of one sample at the deeper stack.
	Instructions *SampleInstr `json:"instructions,omitempty"`
	Notes        []string     `json:"notes"`
}

// MarshalJSON replaces NaN and ±Inf (a median of nothing, a ratio over 0),
// which JSON cannot hold, by 0.
func (r SampleResult) MarshalJSON() ([]byte, error) {
	type plain SampleResult
	p := plain(r)
	for _, x := range []*float64{&p.AllocsPerIt, &p.PerSampleUs, &p.NoPyUs, &p.WallUs} {
		*x = harness.Finite(*x)
	}
	return json.Marshal(p)
}

// pyNotes explain what the columns measured.
func pyNotes(p *peers.Peers) []string {
	return []string{
		"py_deep runs on Debian's /usr/bin/python3 through the venv " + p.Venv + ", with PYTHONHASHSEED=0.",
		"py_deep allocates bytes objects of SIZE bytes (> 512: pymalloc hands them to malloc, so --no-python samples " +
			"them too) in a loop that allocates nothing else; frames are counted in a --native-python-internals capture.",
		"The end-to-end overhead of Python workloads (against bare runs, heaptrack and memray) is measured by " +
			"hlbench compare (compare.md).",
	}
}

func formatPyMarkdown(r PyReport) string {
	var sb strings.Builder
	sb.WriteString(r.Header("heaplens: the cost of one sample in a Python program", "CPython "+r.Python) + "\n\n")
	if len(r.Samples) > 0 {
		sb.WriteString("## Per-sample cost (py_deep: heaplens run --rate 1 vs bare; ALLOC record with native+Python stack + FREE record)\n\n")
		var rows [][]string
		for _, s := range r.Samples {
			rows = append(rows, []string{strconv.Itoa(s.Levels), fmt.Sprintf("%d = %d + %d", s.Frames(), s.NativeFrames, s.PythonFrames),
				strconv.Itoa(s.N), harness.F1(harness.Median(s.BareNs)), harness.F1(harness.Median(s.Rate1Ns)), harness.F2(s.PerSampleUs),
				harness.F1(harness.Median(s.Rate1NoPyNs)), harness.F2(s.NoPyUs), harness.F2(s.WallUs)})
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
	if in := r.Instructions; in != nil {
		fmt.Fprintf(&sb, "\n## Instructions per sample (callgrind, py_deep %d levels, %d frames)\n\n", in.Levels, in.Frames)
		sb.WriteString(harness.Table([]string{">N", ">bare Ir", ">heaplens --rate 1 Ir"}, [][]string{
			{strconv.Itoa(in.N[0]), strconv.FormatUint(in.Bare[0], 10), strconv.FormatUint(in.Rate1[0], 10)},
			{strconv.Itoa(in.N[1]), strconv.FormatUint(in.Bare[1], 10), strconv.FormatUint(in.Rate1[1], 10)}}))
		fmt.Fprintf(&sb, "\nOne sample (ALLOC with its stack, and the FREE): %.0f instructions = (heaplens' difference − bare's) / %d "+
			"(the start-up, sampled too, is the same at both lengths). The agent runs outside valgrind and writes the unwind "+
			"tables as the first stacks arrive, as in any run.\n", in.PerSample, in.N[1]-in.N[0])
	}
	sb.WriteString(harness.Bullets("Notes", r.Notes))
	sb.WriteString(harness.Bullets("Warnings", r.Warnings))
	return sb.String()
}
