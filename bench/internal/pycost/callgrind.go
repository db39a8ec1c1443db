package pycost

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// InstrResult is the instruction count of one sample at py_deep's deeper
// stack: callgrind counts the whole interpreter, so two loop lengths are
// run and the start-up, the same in both, cancels in the difference.
type InstrResult struct {
	Levels    int       `json:"levels"`
	N         [2]int    `json:"n"`
	Bare      [2]uint64 `json:"ir_bare"`
	Rate1     [2]uint64 `json:"ir_rate1"`
	PerSample float64   `json:"ir_per_sample"` // ((Rate1[1]-Rate1[0]) - (Bare[1]-Bare[0])) / (N[1]-N[0])
	Frames    int       `json:"frames"`        // of the sampled stack (perSample's count at this level)
}

// instructions runs py_deep under callgrind, bare and under heaplens run
// --rate 1 (the agent outside valgrind, writing unwind tables as in any
// run), at two loop lengths.
func (b *bench) instructions(levels, frames int) (*InstrResult, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		b.warnings.Add("valgrind not found: no instruction counts")
		return nil, nil
	}
	r := &InstrResult{Levels: levels, N: [2]int{2000, 12000}, Frames: frames}
	for i, n := range r.N {
		args := []string{filepath.Join(b.workloads, "py_deep.py"), strconv.Itoa(levels), strconv.Itoa(n)}
		for _, heaplens := range []bool{false, true} {
			out := filepath.Join(b.tmp, fmt.Sprintf("callgrind.%d.%t", n, heaplens))
			argv := append([]string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, b.peers.VenvPython}, args...)
			if heaplens {
				argv = append([]string{b.heaplens, "run", "-q", "--rate", "1", "-o", filepath.Join(b.tmp, "cg.hlc"), "--"}, argv...)
			}
			if _, err := harness.Run(harness.Command{Argv: argv, Env: harness.CleanEnv(), Timeout: b.o.timeout, Scratch: b.tmp}); err != nil {
				return nil, fmt.Errorf("callgrind py_deep %d: %w", n, err)
			}
			tot, err := harness.CallgrindFile(out)
			if err != nil {
				return nil, err
			}
			if heaplens {
				r.Rate1[i] = tot
			} else {
				r.Bare[i] = tot
			}
		}
	}
	added := (float64(r.Rate1[1]) - float64(r.Rate1[0])) - (float64(r.Bare[1]) - float64(r.Bare[0]))
	r.PerSample = added / float64(r.N[1]-r.N[0])
	logf("instructions per sample, %d frames: %.0f", frames, r.PerSample)
	return r, nil
}
