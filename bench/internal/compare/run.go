package compare

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/peers"
)

// bench holds the paths and state of one invocation.
type bench struct {
	o         options
	peers     *peers.Peers
	root      string
	tmp       string
	heaplens  string // the binary measured
	workloads string // bench/workloads
	warnings  harness.Warnings
	nCapture  int // numbers capture files
}

// config is one way of running a workload.
type config struct {
	Name     string `json:"name"`
	profiler string // "", "heaplens", "heaptrack" or "memray"
	rate     uint64 // heaplens --rate; 0 = the default
	seed     uint64 // heaplens --seed; 0 = random
	mode     string // memray's flags, space-separated: "", "--native", "--aggregate", "--trace-python-allocators"…
	ring     string // heaplens --ring-size; "" = the default
	cold     bool   // heaplens with an empty cache directory (start-up)
	noPython bool   // heaplens --no-python
	// callgrind runs the target (not heaplens' agent) under valgrind
	// --tool=callgrind, to count its instructions (bare and heaplens only).
	callgrind bool
	bin       string // another heaplens binary (the -baseline A/B); "" = b.heaplens
}

var (
	cfgBare      = config{Name: "bare"}
	cfgHeaplens  = config{Name: "heaplens", profiler: "heaplens"}
	cfgRate1     = config{Name: "heaplens --rate 1", profiler: "heaplens", rate: 1, seed: 1}
	cfgHeaptrack = config{Name: "heaptrack", profiler: "heaptrack"}
	cfgMemray    = config{Name: "memray", profiler: "memray"}
	cfgMemrayN   = config{Name: "memray --native", profiler: "memray", mode: "--native"}
	cfgMemrayA   = config{Name: "memray --aggregate", profiler: "memray", mode: "--aggregate"}
	// cfgMemrayT traces pymalloc's objects too: what heaplens samples in
	// a Python program (its PyMem hooks), so the like-for-like capture.
	cfgMemrayT = config{Name: "memray --trace-python-allocators", profiler: "memray", mode: "--trace-python-allocators"}
	// cfgMemrayNT is memray's like-for-like mode for heaplens --rate 1 on
	// Python: every allocation, pymalloc's objects included, with native
	// and Python frames (section "Exact mode").
	cfgMemrayNT = config{Name: "memray --native --trace-python-allocators", profiler: "memray", mode: "--native --trace-python-allocators"}
	// cfgFloor is heaplens with a rate no run reaches: the hooks and the
	// countdown on every call, no sample. Its cost is the interposition
	// floor; the default rate's cost above it is the sampling's.
	cfgFloor = config{Name: "heaplens, no sample (floor)", profiler: "heaplens", rate: 1 << 48, seed: 1}
	cfgCold  = config{Name: "heaplens, cold cache", profiler: "heaplens", cold: true}
	// cfgNoPy separates the cost of heaplens' Python mode (PyMem hooks,
	// Python frames at each sample) from the rest.
	cfgNoPy = config{Name: "heaplens --no-python", profiler: "heaplens", noPython: true}
)

// baseline is another heaplens build, measured beside b.heaplens (-baseline).
func baseline(path string) config {
	return config{Name: "heaplens (baseline)", profiler: "heaplens", bin: path}
}

// seeded is heaplens at the default rate with a fixed seed.
func seeded(seed uint64) config {
	return config{Name: fmt.Sprintf("heaplens --seed %d", seed), profiler: "heaplens", seed: seed}
}

// Measurement is one run of one configuration.
type Measurement struct {
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"` // the whole tree: target, agent, helpers
	// TargetCPUS is the target's own CPU time, printed by the workload
	// (getrusage, process_time or /proc/PID/stat); CPUS − TargetCPUS is
	// what the rest of the tree spent: heaplens' agent, heaptrack_interpret.
	TargetCPUS float64 `json:"target_cpu_s"`
	TreeRSSKB  int64   `json:"tree_maxrss_kb"` // largest peak RSS of one process of the tree
	// SelfRSSKB is the target's own peak RSS, printed by the workload
	// (VmHWM): with the profiler's in-process part, without its agent.
	SelfRSSKB    int64   `json:"self_maxrss_kb"`
	CaptureBytes int64   `json:"capture_bytes"`
	Checksum     string  `json:"checksum,omitempty"`
	Result       float64 `json:"result"` // the workload's key number (loop time, ns per pair…)
	LoopS        float64 `json:"loop_s,omitempty"`
	Instructions uint64  `json:"instructions,omitempty"` // the target's, under callgrind
	// Interpreter is the part of Instructions run in the Python
	// interpreter's own code (its executable or libpython): see interpreterOf.
	Interpreter uint64             `json:"interpreter_instructions,omitempty"`
	capture     string             // kept capture file, when asked for
	kv          map[string]float64 // the workload's result line
}

// command returns the argv that runs argv under c, the capture path it
// writes ("" when none; heaptrack appends its compression suffix itself)
// and callgrind's output file ("" when not under callgrind).
func (b *bench) command(c config, w *workload, args []string) (argv []string, capture, callgrind string) {
	target := w.command(b, args)
	b.nCapture++
	base := filepath.Join(b.tmp, fmt.Sprintf("cap-%d", b.nCapture))
	if c.callgrind {
		callgrind = base + ".callgrind"
		target = append([]string{"valgrind", "-q", "--tool=callgrind", "--callgrind-out-file=" + callgrind}, target...)
	}
	switch c.profiler {
	case "heaplens":
		capture = base + ".hlc"
		bin := b.heaplens
		if c.bin != "" {
			bin = c.bin
		}
		argv = []string{bin, "run", "-q", "-o", capture}
		if c.noPython {
			argv = append(argv, "--no-python")
		}
		if c.rate != 0 {
			argv = append(argv, "--rate", strconv.FormatUint(c.rate, 10))
		}
		if c.seed != 0 {
			argv = append(argv, "--seed", strconv.FormatUint(c.seed, 10))
		}
		if c.ring != "" {
			argv = append(argv, "--ring-size", c.ring)
		}
		return append(append(argv, "--"), target...), capture, callgrind
	case "heaptrack":
		return append([]string{"heaptrack", "-o", base}, target...), base, callgrind
	case "memray":
		capture = base + ".bin"
		argv = []string{b.peers.VenvPython, "-m", "memray", "run", "-q", "-f", "-o", capture}
		argv = append(argv, strings.Fields(c.mode)...)
		// memray runs the script itself: drop the interpreter from target.
		return append(argv, target[1:]...), capture, ""
	}
	return target, "", callgrind
}

// unavailable says why c cannot run w, "" when it can.
func (b *bench) unavailable(c config, w *workload) string {
	if !b.o.Peers && (c.profiler == "heaptrack" || c.profiler == "memray") {
		return "not run (-peers=false)"
	}
	if c.noPython && !w.python {
		return "Python only"
	}
	switch c.profiler {
	case "heaptrack":
		if b.peers.HeaptrackReason != "" {
			return b.peers.HeaptrackReason
		}
	case "memray":
		if !w.python {
			return "Python only"
		}
		if b.peers.MemrayReason != "" {
			return b.peers.MemrayReason
		}
	}
	return ""
}

// runOnce runs w with args under c. With keep, the capture file is left
// in place and named in Measurement.capture.
func (b *bench) runOnce(c config, w *workload, args []string, keep bool) (Measurement, error) {
	var m Measurement
	if w.reset != nil {
		w.reset(b, args)
	}
	argv, capture, callgrind := b.command(c, w, args)
	if callgrind != "" {
		defer os.Remove(callgrind)
	}
	env := harness.CleanEnv()
	if c.cold {
		// An empty cache directory: the library is extracted again and no
		// symbol is cached, as on the first run on a machine.
		dir, err := os.MkdirTemp(b.tmp, "cache-")
		if err != nil {
			return m, err
		}
		defer os.RemoveAll(dir)
		env = harness.SetEnv(env, "XDG_CACHE_HOME", dir)
	}
	cmd := harness.Command{Argv: argv, Env: env, Timeout: b.o.timeout, Scratch: b.tmp}
	if w.stdin != nil {
		cmd.Stdin = w.stdin(b, args)
	}
	label := fmt.Sprintf("%s under %s (%s)", w.Name, c.Name, strings.Join(args, " "))
	r, err := harness.Run(cmd)
	// memray patches the symbols of a statically linked python at start-up
	// and says so every run: benign.
	b.warnings.Note(w.Name+", "+c.Name, r.Stdout+"\n"+r.Stderr, "Correcting symbol for")
	if err != nil {
		return m, fmt.Errorf("%s: %w", label, err)
	}
	m.WallS, m.CPUS, m.TreeRSSKB = r.WallS, r.CPUS, r.TreeRSSKB
	line := harness.ResultLine(r.Stdout, w.key)
	kv := harness.ParseKV(line)
	if w.key == "VmHWM" {
		// A program that prints no result line of its own: its VmHWM line.
		line = ""
		kv = map[string]float64{}
		if kb := harness.VmHWM(r.Stdout); kb > 0 {
			kv["VmHWM"], kv["maxrss_kb"] = float64(kb), float64(kb)
		}
		if cpu, ok := harness.ProcStatCPU(r.Stdout); ok {
			kv["cpu_s"] = cpu
		}
	}
	v, ok := kv[w.key]
	if !ok {
		return m, fmt.Errorf("%s: no %s= in output %q", label, w.key, harness.LastLines(r.Stdout, 5))
	}
	m.Result, m.LoopS, m.SelfRSSKB, m.TargetCPUS, m.kv = v, kv["loop_s"], int64(kv["maxrss_kb"]), kv["cpu_s"], kv
	if m.Checksum, err = b.resultChecksum(w, args, line); err != nil {
		return m, fmt.Errorf("%s: %w", label, err)
	}
	if callgrind != "" {
		if m.Instructions, err = harness.CallgrindFile(callgrind); err != nil {
			return m, fmt.Errorf("%s: %w", label, err)
		}
		objs, err := harness.CallgrindObjectsFile(callgrind)
		if err != nil {
			return m, fmt.Errorf("%s: %w", label, err)
		}
		m.Interpreter = interpreterOf(objs)
	}
	if capture != "" {
		if c.profiler == "heaptrack" {
			// heaptrack -o BASE writes BASE.zst (or BASE.gz without zstd).
			if ms, _ := filepath.Glob(capture + ".*"); len(ms) > 0 {
				capture = ms[0]
			}
		}
		m.CaptureBytes = harness.FileSize(capture)
		if m.CaptureBytes == 0 {
			b.warnings.Add(fmt.Sprintf("%s: no capture file written", label))
		}
		if keep {
			m.capture = capture
		} else {
			os.Remove(capture)
		}
	}
	return m, nil
}

// interleave runs every configuration b.o.Runs times, in the rotated order
// of harness.Rotation, and returns the measurements per configuration.
// keep(j, i) says whether to keep the capture of configuration j in round i.
func (b *bench) interleave(w *workload, args []string, cfgs []config, keep func(j, i int) bool) ([][]Measurement, error) {
	res := make([][]Measurement, len(cfgs))
	for i := 0; i < b.o.Runs; i++ {
		for _, j := range harness.Rotation(len(cfgs), i) {
			m, err := b.runOnce(cfgs[j], w, args, keep != nil && keep(j, i))
			if err != nil {
				return nil, err
			}
			res[j] = append(res[j], m)
		}
	}
	return res, nil
}

// interpreterOf sums the self instructions of the Python interpreter's
// own objects (python3.11, libpython3.12.so…) among a run's. pymalloc is
// there, and its count moves with the address layout, which the library's
// own mappings change: by 0.4 M instructions on py_churn 30 between two
// builds of the library that differ only in the size of their data, none
// sampling (docs/benchmarks.md, "Python per-sample cost").
func interpreterOf(objs map[string]uint64) uint64 {
	var n uint64
	for name, v := range objs {
		if b := filepath.Base(name); strings.HasPrefix(b, "python") || strings.HasPrefix(b, "libpython") {
			n += v
		}
	}
	return n
}
