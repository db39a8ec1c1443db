// Command hlbench measures what heaplens costs a program that allocates:
// time per malloc+free pair bare, with the library preloaded but inactive,
// and under `heaplens run`; instructions per pair under callgrind (which,
// unlike time, does not move with the neighbours' load); and the cost of one
// sampled allocation at several stack depths.
//
// Run it from the repository root after `make`:
//
//	go run ./bench/cmd/hlbench [-runs 7] [-quick] [-out bench/results]
//
// It writes malloc.md and malloc.json into -out and prints the markdown.
//
// The machines this runs on are small and noisy, so every comparison is
// made inside one invocation: the configurations of one measurement are
// interleaved run by run (bare, inactive, heaplens, then the next round in
// a rotated order), and the median of the runs is compared, never a single
// run and never a number from another invocation.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// defaultRate is heaplens' default sampling period (512 KiB), the rate the
// timing runs use: the overhead a user sees without tuning anything.
const defaultRate = 512 << 10

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
	runs     int
	quick    bool
	out      string
	root     string
	target   time.Duration // wanted duration of the slowest mode of one run
	cgIters  int
	cgDeepN  int
	depths   []int
	timeout  time.Duration
	keepTemp bool
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 7, "interleaved runs per configuration (the median is reported)")
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 3 runs, short runs")
	flag.StringVar(&o.out, "out", filepath.Join("bench", "results"), "directory for malloc.md and malloc.json")
	flag.StringVar(&o.root, "root", ".", "repository root (holds bin/heaplens and internal/launch/lib/libheaplens.so)")
	flag.BoolVar(&o.keepTemp, "keep", false, "keep the temporary directory (workload binaries, callgrind files)")
	flag.Parse()
	o.target = 400 * time.Millisecond
	o.cgIters, o.cgDeepN = 200000, 2000
	o.depths = []int{1, 5, 50}
	o.timeout = 3 * time.Minute
	if o.quick {
		o.runs = 3
		o.target = 60 * time.Millisecond
		o.cgIters, o.cgDeepN = 50000, 500
	}
	if o.runs < 1 {
		fmt.Fprintln(os.Stderr, "hlbench: -runs must be at least 1")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "hlbench:", err)
		os.Exit(1)
	}
}

// bench holds the paths one invocation works with.
type bench struct {
	o        options
	tmp      string
	heaplens string // bin/heaplens
	lib      string // libheaplens.so, for the preloaded-only modes
	pairs    string // built malloc_pairs
	deep     string // built deep_sample
	warnings []string
}

func run(o options) error {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	b := &bench{o: o, heaplens: filepath.Join(root, "bin", "heaplens"), lib: filepath.Join(root, "internal", "launch", "lib", "libheaplens.so")}
	for _, p := range []string{b.heaplens, b.lib} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%v (run make in the repository root first, or pass -root)", err)
		}
	}
	b.tmp, err = os.MkdirTemp("", "hlbench-")
	if err != nil {
		return err
	}
	if o.keepTemp {
		fmt.Fprintln(os.Stderr, "hlbench: temporary files in", b.tmp)
	} else {
		defer os.RemoveAll(b.tmp)
	}
	if b.pairs, err = build(root, b.tmp, "malloc_pairs"); err != nil {
		return err
	}
	if b.deep, err = build(root, b.tmp, "deep_sample"); err != nil {
		return err
	}

	rep := Report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: harness.MachineInfo(),
		Runs:    o.runs,
		Quick:   o.quick,
		Rate:    defaultRate,
		Notes:   []string{noteMmap},
	}
	start := time.Now()
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
	rep.Warnings = b.warnings
	rep.Seconds = math.Round(time.Since(start).Seconds())

	return harness.Save(o.out, "malloc", formatMarkdown(rep), rep)
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

// cleanEnv is the environment without anything that would change what is
// measured: an inherited LD_PRELOAD or HEAPLENS_* would turn "bare" into
// something else.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "HEAPLENS_") || strings.HasPrefix(kv, "GLIBC_TUNABLES=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runOnce runs prog with args in mode m and returns the key=value numbers
// of the workload's last output line.
func (b *bench) runOnce(m mode, rate uint64, extraEnv []string, prog string, args ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.o.timeout)
	defer cancel()
	var cmd *exec.Cmd
	env := cleanEnv(extraEnv)
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
	b.noteWarnings(m, args, stderr.String())
	if err != nil {
		return nil, fmt.Errorf("%s %s %s: %v\n%s", m, filepath.Base(prog), strings.Join(args, " "), err, stderr.String())
	}
	kv := harness.ParseKV(lastLine(stdout.String()))
	if len(kv) == 0 {
		return nil, fmt.Errorf("%s %s %s: no result in output %q", m, filepath.Base(prog), strings.Join(args, " "), stdout.String())
	}
	return kv, nil
}

// noteWarnings keeps the agent's warnings (dropped records above all: a
// run that dropped samples did less work than it should have) once each.
func (b *bench) noteWarnings(m mode, args []string, stderr string) {
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(strings.ToLower(l), "warning") {
			continue
		}
		w := fmt.Sprintf("%s %s: %s", m, strings.Join(args, " "), strings.TrimSpace(l))
		dup := false
		for _, x := range b.warnings {
			dup = dup || x == w
		}
		if !dup {
			b.warnings = append(b.warnings, w)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// ---- malloc+free pairs ----
