// Package malloccost measures what heaplens costs a program that
// allocates (hlbench malloc): time per malloc+free pair bare, with the
// library preloaded but inactive, and under `heaplens run`; instructions
// per pair under callgrind (which, unlike time, does not move with the
// neighbours' load); and the cost of one sampled allocation at several
// stack depths. It writes malloc.md and malloc.json.
//
// The machines this runs on are small and noisy, so every comparison is
// made inside one invocation: the configurations of one measurement are
// interleaved run by run (bare, inactive, heaplens, then the next round in
// a rotated order), and the median of the runs is compared, never a single
// run and never a number from another invocation.
package malloccost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/internal/ring"
)

// defaultRate is heaplens' default sampling period (512 KiB), the rate the
// timing runs use: the overhead a user sees without tuning anything.
const defaultRate = ring.DefaultRate

// neverRate is a sampling period so long that no allocation of a benchmark
// is sampled: what remains is the pure unsampled fast path.
const neverRate = 1 << 40

// pinnedMmapEnv fixes glibc's mmap threshold at its initial 128 KiB.
// Setting it explicitly turns off the dynamic threshold (see noteMmap), so
// every large block is a fresh mmap, first-touch page fault and munmap:
// the case where a sampling header must not add page faults.
const pinnedMmapEnv = "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072"

const noteMmap = "glibc's mmap threshold is dynamic: it starts at 128 KiB, and freeing an mmapped block " +
	"raises it to that block's size (up to 32 MiB) and the trim threshold to twice that. After the first " +
	"pair, 1 MiB and 8 MiB blocks therefore come from the top of the heap with no system call, and a pair " +
	"costs tens of ns. The \"mmap pinned\" rows set " + pinnedMmapEnv + ", which disables the adjustment: " +
	"every pair is mmap + a page fault on the touched byte + munmap."

type options struct {
	harness.Common
	target  time.Duration // wanted duration of the slowest mode of one run
	cgIters int
	cgDeepN int
	depths  []int
	timeout time.Duration
}

// Run runs the benchmark.
func Run(c harness.Common) error {
	if err := c.Resolve(7); err != nil {
		return err
	}
	o := options{Common: c, target: 400 * time.Millisecond, cgIters: 200000, cgDeepN: 2000,
		depths: []int{1, 5, 50}, timeout: 3 * time.Minute}
	if o.Quick {
		o.target = 60 * time.Millisecond
		o.cgIters, o.cgDeepN = 50000, 500
	}
	return run(o)
}

var logf = harness.Logf("malloc")

// bench holds the paths one invocation works with.
type bench struct {
	o        options
	tmp      string
	heaplens string // bin/heaplens
	lib      string // libheaplens.so, for the preloaded-only modes
	pairs    string // built malloc_pairs
	deep     string // built deep_sample
	warnings harness.Warnings
}

func run(o options) error {
	root := o.Root
	b := &bench{o: o, heaplens: filepath.Join(root, "bin", "heaplens"), lib: filepath.Join(root, "internal", "launch", "lib", "libheaplens.so")}
	if err := o.Built(b.heaplens, b.lib); err != nil {
		return err
	}
	tmp, done, err := o.TempDir("hlbench-malloc", logf)
	if err != nil {
		return err
	}
	defer done()
	b.tmp = tmp
	if b.pairs, err = build(root, b.tmp, "malloc_pairs"); err != nil {
		return err
	}
	if b.deep, err = build(root, b.tmp, "deep_sample"); err != nil {
		return err
	}

	rep := Report{
		Stamp: o.Stamp(),
		Rate:  defaultRate,
		Notes: []string{noteMmap},
	}
	// Per-sample cost first: the malloc rows' budget uses it.
	if rep.Samples, rep.PairSamples, err = b.perSample(); err != nil {
		return err
	}
	rep.PerFrameNs = perFrameSlope(rep.Samples)
	perSampleNs := map[int]float64{}
	for _, s := range rep.PairSamples {
		perSampleNs[s.Threads] = s.PerSampleNs
	}
	if rep.Pairs, err = b.pairsTiming(perSampleNs); err != nil {
		return err
	}
	if rep.Callgrind, err = b.callgrind(); err != nil {
		return err
	}
	rep.Finish(&b.warnings)

	return harness.Save(o.Out, "malloc", formatMarkdown(rep), rep)
}

// build compiles bench/workloads/NAME.c the way the issue fixes it: -O2
// without frame pointers, as production C code is built, so the unwinder
// has to use DWARF CFI.
func build(root, dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	src := filepath.Join(root, "bench", "workloads", name+".c")
	cmd := exec.Command("gcc", "-std=c11", "-Wall", "-Wextra", "-O2", "-fomit-frame-pointer", "-pthread", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, msg)
	}
	return out, nil
}

// ---- running one workload ----

// mode is how a workload is started.
type mode int

const (
	bare     mode = iota // nothing preloaded
	inactive             // libheaplens.so preloaded without HEAPLENS_DIR: it forwards every call
	profiled             // under `heaplens run` at the mode's rate, agent draining
)

func (m mode) String() string {
	return [...]string{"bare", "inactive", "heaplens"}[m]
}

// runOnce runs prog with args in mode m and returns the key=value numbers
// of the workload's last output line.
func (b *bench) runOnce(m mode, rate uint64, extraEnv []string, prog string, args ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.o.timeout)
	defer cancel()
	var cmd *exec.Cmd
	env := harness.CleanEnv(extraEnv...)
	switch m {
	case bare:
		cmd = exec.CommandContext(ctx, prog, args...)
	case inactive:
		cmd = exec.CommandContext(ctx, prog, args...)
		env = append(env, "LD_PRELOAD="+b.lib)
	case profiled:
		capture := filepath.Join(b.tmp, "run.hlc")
		defer os.Remove(capture)
		a := append([]string{"run", "-q", "-o", capture, "--rate", strconv.FormatUint(rate, 10), "--", prog}, args...)
		cmd = exec.CommandContext(ctx, b.heaplens, a...)
	}
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	b.warnings.Note(fmt.Sprintf("%s %s", m, strings.Join(args, " ")), stderr.String())
	if err != nil {
		return nil, fmt.Errorf("%s %s %s: %v\n%s", m, filepath.Base(prog), strings.Join(args, " "), err, stderr.String())
	}
	kv := harness.ParseKV(lastLine(stdout.String()))
	if len(kv) == 0 {
		return nil, fmt.Errorf("%s %s %s: no result in output %q", m, filepath.Base(prog), strings.Join(args, " "), stdout.String())
	}
	return kv, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// ---- malloc+free pairs ----
