package compare

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/stack"
)

// ScaleResult holds the agent's throughput and the report times.
type ScaleResult struct {
	Throughput []ThroughputResult `json:"throughput"`
	Report     ReportTime         `json:"report"`
}

// ThroughputResult is one run of malloc_pairs at --rate 1: every
// allocation and every free is a record the agent must drain, convert and
// write.
type ThroughputResult struct {
	Threads   int     `json:"threads"`
	Iters     int     `json:"iters_per_thread"`
	LoopS     float64 `json:"loop_s"` // the allocating phase (barrier to last thread's end)
	WallS     float64 `json:"wall_s"`
	Allocs    int     `json:"alloc_records"` // recorded (in the capture)
	Frees     int     `json:"free_records"`
	Dropped   uint64  `json:"dropped_records"`
	DropFrac  float64 `json:"drop_fraction"`
	RecordsPS float64 `json:"records_per_s"` // (allocs+frees recorded) / loop time
	// AgentCPUS is the tree's CPU minus the target's own (printed by the
	// workload): what the agent spent; AgentUsPerRec that per record, and
	// AgentCapacity its inverse: records one fully busy agent CPU drains
	// per second.
	AgentCPUS     float64 `json:"agent_cpu_s"`
	AgentUsPerRec float64 `json:"agent_us_per_record"`
	AgentCapacity float64 `json:"agent_records_per_cpu_s"`
	CaptureBytes  int64   `json:"capture_bytes"`
}

// ReportTime is `heaplens report` on a synthetic capture.
type ReportTime struct {
	Samples      int     `json:"samples"`
	Live         int     `json:"live_at_end"`
	Stacks       int     `json:"stacks"`
	Locations    int     `json:"locations"`
	CaptureBytes int64   `json:"capture_bytes"`
	WriteS       float64 `json:"write_s"`
	// Wall time and peak RSS of `heaplens report` per view and format.
	Runs []ReportRun `json:"runs"`
	// Stages of the same work done in-process (load, compute the peak
	// view, render text and JSON), and the top of its CPU profile.
	Stages  map[string]float64 `json:"stages_s"`
	Profile string             `json:"profile_top,omitempty"`
}

// ReportRun is one `heaplens report` invocation.
type ReportRun struct {
	Args   string  `json:"args"`
	WallS  float64 `json:"wall_s"`
	CPUS   float64 `json:"cpu_s"`
	RSSKB  int64   `json:"maxrss_kb"`
	Output int     `json:"output_bytes"`
}

func (b *bench) scale() (*ScaleResult, error) {
	s := &ScaleResult{}
	if err := b.build("gcc", "malloc_pairs.c", "malloc_pairs", "-std=c11", "-O2", "-fomit-frame-pointer", "-pthread"); err != nil {
		return nil, err
	}
	iters := 1_000_000 // about 1.5–2 s at rate 1 per thread on a 2-vCPU machine
	if b.o.Quick {
		iters = 200_000
	}
	for _, threads := range []int{1, 2, 4} {
		t, err := b.throughput(threads, iters*2/threads)
		if err != nil {
			return nil, err
		}
		s.Throughput = append(s.Throughput, t)
	}
	var err error
	if s.Report, err = b.reportTime(b.o.samples); err != nil {
		return nil, err
	}
	return s, nil
}

// throughput runs malloc_pairs 64 B at --rate 1 with the default ring.
func (b *bench) throughput(threads, iters int) (ThroughputResult, error) {
	t := ThroughputResult{Threads: threads, Iters: iters}
	w := &workload{Name: "malloc_pairs", key: "ns_per_pair",
		command: func(b *bench, args []string) []string {
			return append([]string{filepath.Join(b.tmp, "malloc_pairs")}, args...)
		}}
	args := []string{"64", strconv.Itoa(iters), strconv.Itoa(threads)}
	c := cfgRate1
	m, err := b.runOnce(c, w, args, true)
	if err != nil {
		return t, err
	}
	defer os.Remove(m.capture)
	d, err := b.report(m.capture, "allocs")
	if err != nil {
		return t, err
	}
	t.WallS, t.CaptureBytes = m.WallS, m.CaptureBytes
	// The workload's own line has the loop time and its own CPU time.
	t.LoopS = m.kv["wall_ns"] / 1e9
	t.Allocs = d.Total.Samples
	t.Dropped = d.dropped()
	// Every block the loop allocates is freed: the frees recorded are the
	// loop's, less those dropped (start-up frees are few and ignored).
	t.Frees = threads*iters - int(d.Drops.Frees)
	if t.Frees < 0 {
		t.Frees = 0
	}
	rec := float64(t.Allocs + t.Frees)
	t.DropFrac = ratio(float64(t.Dropped), rec+float64(t.Dropped))
	t.RecordsPS = ratio(rec, t.LoopS)
	t.AgentCPUS = m.CPUS - m.kv["cpu_s"]
	t.AgentUsPerRec = ratio(t.AgentCPUS*1e6, rec)
	t.AgentCapacity = ratio(rec, t.AgentCPUS)
	logf("throughput, %d threads: %.0f records/s for %.2f s, dropped %d (%.2f%%), agent %.2f CPU s = %.2f µs/record",
		threads, t.RecordsPS, t.LoopS, t.Dropped, 100*t.DropFrac, t.AgentCPUS, t.AgentUsPerRec)
	return t, nil
}

// synthParams shape a synthetic capture.
type synthParams struct {
	Samples   int // allocations
	Live      int // allocations still live at the end
	Stacks    int
	Locations int
	Depth     int // frames per stack
	Threads   int
}

// writeSynthetic writes a capture of p.Samples allocations over p.Stacks
// distinct stacks: the live set grows to p.Live, then every allocation
// frees a random live block, so p.Samples − p.Live are freed. Sizes and
// times are plausible for the default rate (sampled blocks skew large).
func writeSynthetic(w io.Writer, p synthParams) error {
	cw, err := capture.NewWriter(w)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(7, 11))
	const start = int64(1_000_000_000)
	if err := cw.Meta(&capture.Meta{FormatVersion: capture.Version, HeaplensVersion: "synthetic", Rate: defaultRate,
		StartUnixNano: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), Command: []string{"synthetic"}, Host: "bench"}); err != nil {
		return err
	}
	if err := cw.Process(&capture.Process{Stream: 1, PID: 4242, PPID: 1, StartMonoNano: start,
		Cmdline: []string{"synthetic"}, Exe: "/usr/bin/synthetic"}); err != nil {
		return err
	}
	if err := cw.Mapping(&capture.Mapping{ID: 1, Stream: 1, Start: 0x400000, Limit: 0x400000 + 1<<26, File: "/usr/bin/synthetic",
		BuildID: "00112233445566778899aabbccddeeff00112233", TimeNano: start}); err != nil {
		return err
	}
	for i := 1; i <= p.Locations; i++ {
		if err := cw.Location(&capture.Location{ID: uint64(i), MappingID: 1, Address: 0x400000 + uint64(i)*64,
			Lines: []capture.Line{{Function: fmt.Sprintf("module%d::function_%d", i%97, i), File: fmt.Sprintf("src/file_%d.cc", i%503), Line: 10 + i%900}}}); err != nil {
			return err
		}
	}
	locBase := p.Locations + 1 // stack IDs start after the location IDs
	for s := 0; s < p.Stacks; s++ {
		locs := make([]uint64, p.Depth)
		for k := range locs {
			locs[k] = uint64(1 + rng.IntN(p.Locations))
		}
		if err := cw.Stack(&capture.Stack{ID: uint64(locBase + s), Locations: locs}); err != nil {
			return err
		}
	}
	live := make([]uint64, 0, p.Live)
	t := start
	addr := uint64(0x5555_0000_0000)
	for i := 0; i < p.Samples; i++ {
		t += 1 + int64(rng.ExpFloat64()*20_000)
		tid := uint32(4242 + rng.IntN(p.Threads))
		if len(live) >= p.Live {
			k := rng.IntN(len(live))
			if err := cw.Free(&capture.Free{Stream: 1, TID: tid, TimeNano: t, Addr: live[k]}); err != nil {
				return err
			}
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		addr += 4096
		size := uint64(64 + rng.ExpFloat64()*200_000)
		// A Zipf-like choice: a few stacks hold most samples, as in real profiles.
		stack := uint64(locBase + int(float64(p.Stacks)*rng.Float64()*rng.Float64()))
		if err := cw.Alloc(&capture.Alloc{Stream: 1, TID: tid, TimeNano: t, Addr: addr, Size: size, StackID: stack, Func: capture.FuncMalloc}); err != nil {
			return err
		}
		live = append(live, addr)
	}
	if err := cw.End(&capture.End{Stream: 1, TimeNano: t + 1000, Known: true}); err != nil {
		return err
	}
	return cw.Close()
}

// reportTime writes a synthetic capture of n samples and times `heaplens
// report` on it: the text and JSON peak views and the text leaks view.
func (b *bench) reportTime(n int) (ReportTime, error) {
	p := synthParams{Samples: n, Live: n / 10, Stacks: 10_000, Locations: 20_000, Depth: 24, Threads: 8}
	rt := ReportTime{Samples: p.Samples, Live: p.Live, Stacks: p.Stacks, Locations: p.Locations}
	path := filepath.Join(b.tmp, "synthetic.hlc")
	defer os.Remove(path)
	t0 := time.Now()
	f, err := os.Create(path)
	if err != nil {
		return rt, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = writeSynthetic(bw, p)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return rt, fmt.Errorf("writing the synthetic capture: %w", err)
	}
	rt.WriteS = time.Since(t0).Seconds()
	rt.CaptureBytes = harness.FileSize(path)
	logf("synthetic capture: %d samples, %d live, %s, written in %.1f s", n, p.Live, harness.ByteLabel(float64(rt.CaptureBytes)), rt.WriteS)
	for _, args := range [][]string{
		{"--view", "peak"},
		{"--view", "peak", "--format", "json"},
		{"--view", "leaks"},
	} {
		out := filepath.Join(b.tmp, "report.out")
		argv := append(append([]string{b.heaplens, "report", path}, args...), "-o", out)
		r, err := harness.Run(harness.Command{Argv: argv, Env: harness.CleanEnv(), Timeout: b.o.timeout, Scratch: b.tmp})
		if err != nil {
			return rt, err
		}
		run := ReportRun{Args: strings.Join(args, " "), WallS: r.WallS, CPUS: r.CPUS, RSSKB: r.TreeRSSKB, Output: int(harness.FileSize(out))}
		os.Remove(out)
		logf("heaplens report %s: %.1f s, %.1f CPU s, %s peak RSS", run.Args, run.WallS, run.CPUS, harness.ByteLabel(float64(run.RSSKB)*1024))
		rt.Runs = append(rt.Runs, run)
	}
	rt.Stages, rt.Profile, err = b.profileReport(path)
	return rt, err
}

// profileReport does what `heaplens report --view peak` does, in-process,
// timing each stage under a CPU profile, and returns the profile's top
// functions (go tool pprof -top), so that a slow report says where its
// time goes.
func (b *bench) profileReport(path string) (map[string]float64, string, error) {
	stages := map[string]float64{}
	prof := filepath.Join(b.o.Out, "report-profile.pprof")
	if err := os.MkdirAll(b.o.Out, 0o755); err != nil {
		return nil, "", err
	}
	pf, err := os.Create(prof)
	if err != nil {
		return nil, "", err
	}
	defer pf.Close()
	runtime.GC()
	if err := pprof.StartCPUProfile(pf); err != nil {
		return nil, "", err
	}
	stage := func(name string, f func() error) error {
		t := time.Now()
		err := f()
		stages[name] = time.Since(t).Seconds()
		return err
	}
	var c *capture.Capture
	var res *export.Result
	err = stage("load", func() (err error) {
		if c, err = capture.Load(path); err == nil {
			stack.Stitch(c)
		}
		return err
	})
	if err == nil {
		err = stage("compute peak (one replay: peak and timeline)", func() (err error) {
			res, err = export.Query{View: "peak"}.Compute(c)
			return err
		})
	}
	if err == nil {
		err = stage("render text", func() error { return export.Text(io.Discard, res.Capture, res.Profile, export.TextOptions{Top: 20}) })
	}
	if err == nil {
		err = stage("render json", func() error {
			return export.JSON(io.Discard, res.Capture, res.Profile, export.DocOptions{Timeline: res.Timeline(), Filter: res.Filter})
		})
	}
	pprof.StopCPUProfile()
	if err != nil {
		return nil, "", fmt.Errorf("in-process report: %w", err)
	}
	for k, v := range stages {
		logf("in-process report, %s: %.2f s", k, v)
	}
	out, perr := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=25", prof).Output()
	if perr != nil {
		return stages, "go tool pprof failed: " + perr.Error(), nil
	}
	return stages, topLines(string(out), 25), nil
}

// topLines keeps pprof -top's table: from the header line on, at most n rows.
func topLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") {
			end := min(len(lines), i+1+n)
			return strings.Join(lines[i:end], "\n")
		}
	}
	return s
}
