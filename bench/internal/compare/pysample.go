package compare

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// SampleResult is the cost of one sampled allocation (ALLOC record with
// native and Python stack, and the FREE record of the block) in py_deep.
type SampleResult struct {
	Levels int `json:"levels"` // C re-entries between main and the allocating loop
	// Frames of the sampled stack, counted in a capture: NativeFrames is
	// what the unwinder walks (the interpreter's own frames included, each
	// _PyEval_EvalFrameDefault activation once), PythonFrames what the
	// Python walk reads.
	NativeFrames int       `json:"native_frames"`
	PythonFrames int       `json:"python_frames"`
	AllocsPerIt  float64   `json:"allocs_per_iteration"` // sampled allocations per loop iteration at rate 1
	N            int       `json:"n"`
	Size         int       `json:"size"`
	BareNs       []float64 `json:"bare_ns_per_alloc"`
	Rate1Ns      []float64 `json:"rate1_ns_per_alloc"`
	Rate1NoPyNs  []float64 `json:"rate1_nopython_ns_per_alloc"`
	BareWallS    []float64 `json:"bare_wall_s"`
	Rate1WallS   []float64 `json:"rate1_wall_s"`
	// PerSampleUs = (median rate-1 loop ns/alloc − median bare) / allocs per
	// iteration, timed inside the loop; NoPyUs the same with --no-python
	// (native stack only, no Python walk); WallUs from the harness clock of
	// the whole runs: (t_rate1 − t_bare) / (N × allocs per iteration).
	PerSampleUs float64 `json:"per_sample_us"`
	NoPyUs      float64 `json:"per_sample_nopython_us"`
	WallUs      float64 `json:"per_sample_wall_us"`
}

// Frames is NativeFrames + PythonFrames.
func (r SampleResult) Frames() int { return r.NativeFrames + r.PythonFrames }

// perSample measures py_deep at each level count: bare, heaplens --rate 1
// and heaplens --rate 1 --no-python, interleaved.
func (b *bench) perSample(o pyOptions) ([]SampleResult, error) {
	var res []SampleResult
	for _, lv := range o.levels {
		r := SampleResult{Levels: lv, N: o.deepN, Size: o.deepSize}
		args := []string{strconv.Itoa(lv), strconv.Itoa(r.N), strconv.Itoa(r.Size)}
		if err := b.countFrames(&r); err != nil {
			return nil, err
		}
		ms, err := b.interleave(pyDeep, args, []config{cfgBare, cfgRate1, cfgRate1NoPy}, nil)
		if err != nil {
			return nil, err
		}
		perAlloc := func(m Measurement) float64 { return m.kv["ns_per_alloc"] }
		wall := func(m Measurement) float64 { return m.WallS }
		r.BareNs, r.Rate1Ns, r.Rate1NoPyNs = harness.Field(ms[0], perAlloc), harness.Field(ms[1], perAlloc), harness.Field(ms[2], perAlloc)
		r.BareWallS, r.Rate1WallS = harness.Field(ms[0], wall), harness.Field(ms[1], wall)
		k := r.AllocsPerIt
		r.PerSampleUs = (harness.Median(r.Rate1Ns) - harness.Median(r.BareNs)) / k / 1000
		r.NoPyUs = (harness.Median(r.Rate1NoPyNs) - harness.Median(r.BareNs)) / k / 1000
		r.WallUs = (harness.Median(r.Rate1WallS) - harness.Median(r.BareWallS)) * 1e6 / (float64(r.N) * k)
		pylogf("sample, %d frames (%d native + %d Python): %.2f µs (--no-python %.2f µs, by wall %.2f µs)",
			r.Frames(), r.NativeFrames, r.PythonFrames, r.PerSampleUs, r.NoPyUs, r.WallUs)
		res = append(res, r)
	}
	return res, nil
}

// countFrames runs py_deep once at rate 1 keeping the interpreter's native
// frames, and counts the frames of the loop's allocation stack: the stack
// with the most bytes in the allocs view. It also checks that the loop
// makes the allocations it should (allocs per iteration = bytes / size / N).
func (b *bench) countFrames(r *SampleResult) error {
	n := min(r.N, 20000)
	capture := filepath.Join(b.tmp, "frames.hlc")
	defer os.Remove(capture)
	py := []string{b.peers.VenvPython, filepath.Join(b.workloads, "py_deep.py"), strconv.Itoa(r.Levels), strconv.Itoa(n), strconv.Itoa(r.Size)}
	cmd := exec.Command(b.heaplens, append([]string{"run", "-q", "-o", capture, "--rate", "1", "--native-python-internals", "--"}, py...)...)
	cmd.Env = harness.CleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("py_deep %d levels under heaplens: %v\n%s", r.Levels, err, out)
	}
	out, err := exec.Command(b.heaplens, "report", capture, "--view", "allocs", "--format", "folded").Output()
	if err != nil {
		return fmt.Errorf("heaplens report %s: %v", capture, err)
	}
	stack, bytes := heaviestStack(string(out))
	if stack == "" {
		return fmt.Errorf("py_deep %d levels: no stack in the capture", r.Levels)
	}
	r.NativeFrames, r.PythonFrames = countStack(stack)
	r.AllocsPerIt = float64(bytes) / float64(r.Size) / float64(n)
	if r.AllocsPerIt < 0.99 || r.AllocsPerIt > 1.01 {
		b.warnings.Add(fmt.Sprintf("py_deep %d levels: %.3f sampled allocations per loop iteration at rate 1, not 1", r.Levels, r.AllocsPerIt))
	}
	if r.AllocsPerIt <= 0 {
		r.AllocsPerIt = 1
	}
	return nil
}

// heaviestStack returns the frames (without the leading "[pid comm]"
// process frame) and weight of the heaviest line of folded output.
func heaviestStack(folded string) (stack string, weight int64) {
	for _, l := range strings.Split(folded, "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		w, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil || w <= weight {
			continue
		}
		stack, weight = l[:i], w
	}
	if strings.HasPrefix(stack, "[") {
		if _, rest, ok := strings.Cut(stack, ";"); ok {
			stack = rest
		}
	}
	return stack, weight
}

// pyFrame matches a Python frame of folded output: "func (file.py:LINE)".
var pyFrame = regexp.MustCompile(`\(.*\.pyw?:\d+\)$`)

// countStack counts the frames of one folded stack captured with
// --native-python-internals. There each _PyEval_EvalFrameDefault frame is
// shown as its activation's Python frames, so the native frames the
// unwinder walked are the shown native frames plus one per run of
// consecutive Python frames.
func countStack(stack string) (native, python int) {
	prevPy := false
	for _, f := range strings.Split(stack, ";") {
		if pyFrame.MatchString(f) {
			python++
			if !prevPy {
				native++ // the activation's eval frame
			}
			prevPy = true
			continue
		}
		native++
		prevPy = false
	}
	return native, python
}

// SampleInstr is the instruction count of one sample at py_deep's deeper
// stack: callgrind counts the whole interpreter, so two loop lengths are
// run and the start-up, the same in both, cancels in the difference.
type SampleInstr struct {
	Levels    int       `json:"levels"`
	N         [2]int    `json:"n"`
	Bare      [2]uint64 `json:"ir_bare"`
	Rate1     [2]uint64 `json:"ir_rate1"`
	PerSample float64   `json:"ir_per_sample"` // ((Rate1[1]-Rate1[0]) - (Bare[1]-Bare[0])) / (N[1]-N[0])
	Frames    int       `json:"frames"`        // of the sampled stack (perSample's count at this level)
}

// sampleInstructions runs py_deep under callgrind, bare and under heaplens
// run --rate 1 (the agent outside valgrind, writing unwind tables as in
// any run), at two loop lengths.
func (b *bench) sampleInstructions(levels, frames int) (*SampleInstr, error) {
	if b.peers.ValgrindReason != "" {
		b.warnings.Add("no instruction counts: " + b.peers.ValgrindReason)
		return nil, nil
	}
	r := &SampleInstr{Levels: levels, N: [2]int{2000, 12000}, Frames: frames}
	for i, n := range r.N {
		args := []string{strconv.Itoa(levels), strconv.Itoa(n)}
		for _, c := range []config{cfgBare, cfgRate1} {
			c.callgrind = true
			m, err := b.runOnce(c, pyDeep, args, false)
			if err != nil {
				return nil, err
			}
			if c.profiler == "" {
				r.Bare[i] = m.Instructions
			} else {
				r.Rate1[i] = m.Instructions
			}
		}
	}
	added := (float64(r.Rate1[1]) - float64(r.Rate1[0])) - (float64(r.Bare[1]) - float64(r.Bare[0]))
	r.PerSample = added / float64(r.N[1]-r.N[0])
	pylogf("instructions per sample, %d frames: %.0f", frames, r.PerSample)
	return r, nil
}
