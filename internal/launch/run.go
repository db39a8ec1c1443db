package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/collect"
	"github.com/heaplens/heaplens/internal/privdir"
	"github.com/heaplens/heaplens/internal/sigstart"
	"github.com/heaplens/heaplens/internal/size"
	"golang.org/x/sys/unix"
)

// Options configure one profiled run.
type Options struct {
	Command  []string
	Output   string // capture path; "" means ./heaplens-COMMAND-PID.hlc
	Rate     uint64 // bytes; 1 samples every allocation
	Seed     uint64 // 0 draws a random seed in each process
	RingSize uint64 // bytes per process ring; 0 = library default
	NoPython bool   // no Python frames or PyMem hooks
	NoFollow bool   // profile the command's own process only, not its children
	// NativePythonInternals keeps the interpreter's own frames in stacks with Python frames.
	NativePythonInternals bool
	Version               string // written into the capture
	Stdin                 io.Reader
	Stdout                io.Writer
	Stderr                io.Writer
	Log                   io.Writer // heaplens's own messages

	// Started, if set, is called with the capture path once the capture
	// file holds its Meta record (heaplens run --live serves it from then).
	Started func(capture string)
	// Observer, if set, sees every record as it is written to the capture
	// (the continuous profile of heaplens run --pprof-addr and --push).
	Observer capture.Observer
}

// Result is what a run produced.
type Result struct {
	ExitCode int    // the command's; 128+N when killed by signal N
	Status   string // how the command ended, in words
	Capture  string // "" when nothing was profiled
	Streams  int    // process images seen
	Warnings []string
	PeakRSS  uint64 // highest total RSS of the profiled processes, 0 if never read
}

// Ring sizes the library takes (it falls back to 16MiB on others): a power
// of two, at least a few hundred samples, at most what tmpfs comfortably
// holds per process.
const (
	MinRingSize = 64 << 10
	MaxRingSize = 1 << 30
	// ExactRingSize is the ring of --rate 1 unless --ring-size says
	// otherwise: an interpreter's start-up records ~100 MB of stacks in a
	// tenth of a second, faster than the agent can name new stacks, and a
	// 16 MiB ring drops a third of them; `import torch` outran a 64 MiB one
	// in 3 of 4 runs once the target got faster (0 of 3 at 128 MiB). The
	// ring is backed only as it fills.
	ExactRingSize = 128 << 20
	// DefaultRingSize is the library's own default.
	DefaultRingSize = 16 << 20
)

// CheckRingSize says what is wrong with a ring size.
func CheckRingSize(n uint64) error {
	if n < MinRingSize || n > MaxRingSize || n&(n-1) != 0 {
		return fmt.Errorf("--ring-size must be a power of two from %s to %s, not %s",
			size.FormatSize(MinRingSize), size.FormatSize(MaxRingSize), size.FormatSize(n))
	}
	return nil
}

// The rings are drained every pollEvery, and at first sooner, from
// pollFirst doubling: a module's unwind table is built once its first
// stack is drained, and until the library maps it, every stack through the
// module is libgcc's, at ~10 times the cost.
const (
	pollEvery = 20 * time.Millisecond
	pollFirst = time.Millisecond
	// pollYoung caps the pace while a process is young (see rssEvery): a
	// run of 20 ms that starts 10 ms after the agent still gets readings
	// on a loaded machine.
	pollYoung = 5 * time.Millisecond
)
const flushEvery = time.Second

// RSS is read every rssEvery, and at every poll (1, 3, 7 ms into the run,
// then every 5 ms) while a process started less than rssEvery ago, so that
// a run of a few tens of milliseconds has a timeline too; for at most rssYoungMax processes, whose every reading costs.
const (
	rssEvery    = 100 * time.Millisecond
	rssYoungMax = 32
)
const residentEvery = time.Second

// Run runs the command to completion under the profiler. A command that
// cannot be found gives ExitCode 127 and an error wrapping ErrNotFound, one
// that cannot be run 126 and ErrNotExecutable, as in the shell. A
// statically linked program is run without profiling after a warning.
func Run(o Options) (*Result, error) {
	if len(o.Command) == 0 {
		return &Result{ExitCode: 2}, errors.New("no command given")
	}
	if err := CheckRingSize(o.RingSize); o.RingSize != 0 && err != nil {
		return &Result{ExitCode: 2}, err
	}
	path, err := Resolve(o.Command[0])
	if errors.Is(err, ErrNotExecutable) {
		return &Result{ExitCode: 126}, err
	}
	if err != nil {
		return &Result{ExitCode: 127}, err
	}
	if err := CheckDynamic(path); errors.Is(err, ErrStatic) {
		return runUnprofiled(o, path, fmt.Sprintf("%s is statically linked: LD_PRELOAD cannot reach its allocator, so it ran unprofiled", o.Command[0]))
	}
	if name, rt := sanitizerIn(path, os.Environ()); name != "" {
		return runUnprofiled(o, path, sanitizerWhy(o.Command[0], name, rt))
	}
	lib, err := LibraryPath()
	if err != nil {
		return &Result{ExitCode: 1}, err
	}
	if why := preflight(path, lib, libraryBytes()); why != "" {
		return runUnprofiled(o, path, fmt.Sprintf("%s cannot be profiled: %s; it ran without profiling", o.Command[0], why))
	}
	dir, err := sessionDir()
	if err != nil {
		return &Result{ExitCode: 1}, err
	}
	defer removeSessionDir(dir)

	cmd := command(o, path)
	cmd.Env = profiledEnv(os.Environ(), preloadEntry(lib), dir, o)
	signals := catchSignals()
	defer signal.Stop(signals)
	if err := start(cmd); err != nil {
		return &Result{ExitCode: 126}, fmt.Errorf("%s: %w", o.Command[0], err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		restoreAS(cmd.Process.Pid) // the loader ignores LD_PRELOAD: no library to do it
	}
	out := o.Output
	if out == "" {
		out = fmt.Sprintf("heaplens-%s-%d.hlc", sanitize(filepath.Base(o.Command[0])), cmd.Process.Pid)
	}
	f, err := privdir.CreateFile(out, 0o600)
	if err != nil {
		// The target runs on unprofiled; never leave it orphaned.
		fmt.Fprintf(o.Log, "heaplens: cannot write the capture: %v; the command runs on unprofiled\n", err)
		res := wait(cmd, signals)
		return res, nil
	}
	defer f.Close()
	w, err := newCapture(f, capture.Meta{HeaplensVersion: o.Version, Rate: o.Rate, Command: o.Command}, o.Observer)
	if err != nil {
		return &Result{ExitCode: 1}, err
	}
	if o.Started != nil {
		w.Flush()
		o.Started(out)
	}
	col := collect.New(dir, lib, w)
	col.RingSize = o.RingSize
	if col.RingSize == 0 {
		col.RingSize = DefaultRingSize
		if o.Rate == 1 {
			col.RingSize = ExactRingSize
		}
	}
	col.BuildUnwindTables()
	col.NativePythonInternals = o.NativePythonInternals
	defer col.Close()
	col.Await(cmd.Process.Pid)

	done := make(chan struct{})
	var res *Result
	go func() { res = wait(cmd, nil); close(done) }()
	every := pollFirst
	tick := time.NewTimer(every)
	defer tick.Stop()
	p := newPoller(col, w)
	var watch *unprofiled
	if !o.NoFollow { // without following, children are unprofiled by request
		watch = newUnprofiled(cmd.Process.Pid, lib, dir)
	}
loop:
	for {
		select {
		case <-done:
			break loop
		case sig := <-signals:
			relay(cmd.Process, sig)
		case <-tick.C:
			every = min(2*every, pollEvery)
			if p.wasYoung {
				every = min(every, pollYoung)
			}
			tick.Reset(every)
			if p.tick() && watch != nil {
				notes, execd := watch.scan(col.Images(), col.Marked())
				for _, n := range notes {
					col.Warn(n)
				}
				for _, pid := range execd {
					col.Execd(pid)
				}
			}
		}
	}
	col.SetExit(cmd.Process.Pid, cmd.ProcessState.Sys().(syscall.WaitStatus))
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > 0 {
		col.SetMaxRSS(uint64(ru.Maxrss) << 10) // KiB on Linux
	}
	collectErr := p.err
	if collectErr == nil {
		collectErr = col.Poll(true)
	}
	if err := w.Close(); err != nil && collectErr == nil {
		collectErr = err
	}
	res.Capture = out
	res.Streams = col.Streams()
	res.Warnings = col.Warnings()
	res.PeakRSS = p.rss.peak
	if collectErr != nil {
		return res, fmt.Errorf("collecting the profile: %w", collectErr)
	}
	return res, nil
}

// newCapture starts the capture in f: its writer, seeing everything through
// obs when set, and its Meta record, m with the format version, the start
// time and the host filled in.
func newCapture(f *os.File, m capture.Meta, obs capture.Observer) (*capture.Writer, error) {
	w, err := capture.NewWriter(f)
	if err != nil {
		return nil, err
	}
	if obs != nil {
		w.SetObserver(obs)
	}
	m.FormatVersion, m.StartUnixNano = capture.Version, time.Now().UnixNano()
	m.Host, _ = os.Hostname()
	return w, w.Meta(&m)
}

// poller is what the agent does on every tick while a run or an attach
// session goes on: drain the rings, read RSS and residency each at its
// pace, flush the capture once a second. The first error stops the
// collecting (err); the flushing goes on.
type poller struct {
	col                              *collect.Collector
	w                                *capture.Writer
	rss                              *rssSampler
	lastFlush, lastRSS, lastResident time.Time
	residentCost                     time.Duration // how long the last reading of residency took
	residentDue                      bool          // RSS reached a new high since the last reading
	wasYoung                         bool          // young() at the last tick: the run's pace (pollYoung)
	started                          time.Time
	err                              error
}

func newPoller(col *collect.Collector, w *capture.Writer) *poller {
	rss := newRSSSampler()
	rss.highWater = col.HighWater
	return &poller{col: col, w: w, rss: rss, lastFlush: time.Now(), lastResident: time.Now(), started: time.Now()}
}

// tick does one round; it reports whether RSS was read at its regular pace
// (every rssEvery): the unprofiled-process watch counts those rounds.
func (p *poller) tick() (rssRound bool) {
	if p.err == nil {
		p.err = p.col.Poll(false)
	}
	p.wasYoung = p.young()
	if regular := time.Since(p.lastRSS) >= rssEvery; p.err == nil && (regular || p.wasYoung) {
		var high bool
		high, p.err = p.rss.sample(p.w, p.col.Live(), p.col.RingBytes)
		if regular {
			p.lastRSS, rssRound = time.Now(), true
		}
		p.residentDue = p.residentDue || high
	}
	// The pages at RSS's new high, for the resident view: at once, or, to
	// spend little of the agent's time on them (a reading costs up to 8 MiB
	// of pagemap), at the first poll after ten times the last one's cost,
	// within 50 ms: a reading stands for a moment up to 100 ms before it
	// (heap.Residency).
	if p.residentDue && p.err == nil && time.Since(p.lastResident) >= min(10*p.residentCost, 50*time.Millisecond) {
		p.readResidency()
	}
	if p.err == nil && time.Since(p.lastResident) >= residentEvery {
		p.readResidency()
	}
	if time.Since(p.lastFlush) >= flushEvery {
		p.w.Flush()
		p.lastFlush = time.Now()
	}
	return rssRound
}

// young reports whether RSS is read at this poll beside the regular
// rounds: the run is in its first rssEvery, or a process of a small tree is.
func (p *poller) young() bool {
	if time.Since(p.started) < rssEvery {
		return true
	}
	return len(p.col.Live()) <= rssYoungMax && p.col.Young(rssEvery)
}

// readResidency reads the pages of the large blocks, and times it.
func (p *poller) readResidency() {
	p.residentDue = false
	t := time.Now()
	p.err = p.col.ReadResidency()
	p.lastResident = time.Now()
	p.residentCost = p.lastResident.Sub(t)
}

func command(o Options, path string) *exec.Cmd {
	cmd := exec.Command(path, o.Command[1:]...)
	cmd.Args[0] = o.Command[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	return cmd
}

// restoreAS gives process pid the address-space limit heaplens was started
// with, which its entry point raised, when no library does it first: at
// once, as the command starts.
func restoreAS(pid int) {
	if soft, hard, ok := sigstart.AddressSpace(); ok && soft != unix.RLIM_INFINITY {
		unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: soft, Max: hard}, nil)
	}
}

// runUnprofiled runs the command as it is, without the library, and writes
// a capture that says why (a Note), so that the run's warnings and every
// report of it say so, and heaplens run -q stays silent.
func runUnprofiled(o Options, path, why string) (*Result, error) {
	cmd := command(o, path)
	signals := catchSignals()
	defer signal.Stop(signals)
	if err := start(cmd); err != nil {
		return &Result{ExitCode: 126}, fmt.Errorf("%s: %w", o.Command[0], err)
	}
	restoreAS(cmd.Process.Pid) // no library to do it
	out := o.Output
	if out == "" {
		out = fmt.Sprintf("heaplens-%s-%d.hlc", sanitize(filepath.Base(o.Command[0])), cmd.Process.Pid)
	}
	var w *capture.Writer
	f, err := privdir.CreateFile(out, 0o600)
	if err == nil {
		defer f.Close()
		if w, err = newCapture(f, capture.Meta{HeaplensVersion: o.Version, Rate: o.Rate, Command: o.Command}, o.Observer); err == nil {
			err = w.Note(&capture.Note{Text: why})
		}
	}
	if err != nil {
		fmt.Fprintf(o.Log, "heaplens: cannot write the capture: %v\n", err)
	}
	res := wait(cmd, signals)
	res.Warnings = []string{why}
	if w != nil {
		if err := w.Close(); err != nil {
			return res, fmt.Errorf("writing the capture: %w", err)
		}
		res.Capture = out
	}
	return res, nil
}

// wait waits for the command, forwarding signals when given a channel.
func wait(cmd *exec.Cmd, signals chan os.Signal) *Result {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	for {
		select {
		case <-done:
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				return &Result{ExitCode: 128 + int(ws.Signal()), Status: "killed by signal " + strconv.Itoa(int(ws.Signal())) + " (" + ws.Signal().String() + ")"}
			}
			return &Result{ExitCode: ws.ExitStatus(), Status: "exited with status " + strconv.Itoa(ws.ExitStatus())}
		case sig := <-signals:
			relay(cmd.Process, sig)
		}
	}
}

// sessionDir creates the private directory of the rings (0700: a child
// that switches user cannot create its ring there, and its library stays
// inactive). Its parent is checked as the library's is.
// removeSessionDir deletes a session directory and the rings in it. A
// process forked as the session ends may add a ring file after RemoveAll
// read the directory, so it tries again while the directory stays; once
// gone, a later child finds none to write into.
func removeSessionDir(dir string) {
	for try := 0; try < 100; try++ {
		if os.RemoveAll(dir) == nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func sessionDir() (string, error) {
	base := "/dev/shm"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "heaplens-")
	if err != nil {
		dir, err = os.MkdirTemp(os.TempDir(), "heaplens-")
	}
	if err != nil {
		return "", fmt.Errorf("launch: session directory: %w", err)
	}
	created := dir
	if dir, _, err = privdir.Resolve(created); err == nil {
		err = privdir.Check(dir)
	}
	if err == nil && len(dir) > maxDirLen {
		err = fmt.Errorf("%s: path longer than %d bytes; set TMPDIR to a shorter one", dir, maxDirLen)
	}
	if err != nil {
		os.Remove(created)
		return "", fmt.Errorf("launch: session directory: %w", err)
	}
	return dir, nil
}

// maxDirLen leaves the library room for /ring.PID.SEQ in its 4096-byte path.
const maxDirLen = 4000

func profiledEnv(env []string, lib, dir string, o Options) []string {
	out := env[:0:0]
	preload, asan := lib, ""
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "LD_PRELOAD="):
			if old := strings.TrimPrefix(kv, "LD_PRELOAD="); old != "" {
				preload = lib + ":" + old
			}
		case strings.HasPrefix(kv, "HEAPLENS_"):
		case strings.HasPrefix(kv, "ASAN_OPTIONS="):
			asan = kv
		default:
			out = append(out, kv)
		}
	}
	// ASan checks that its runtime is the first library, which it is not
	// behind the library: turned off, so that an ASan program the command
	// execs starts, finds the library and restarts itself without it, with
	// ASAN_OPTIONS as it was (preload/sanitizer.c).
	if old, ok := strings.CutPrefix(asan, "ASAN_OPTIONS="); ok {
		out = append(out, "ASAN_OPTIONS="+strings.TrimLeft(old+":", ":")+"verify_asan_link_order=0", "HEAPLENS_ASAN_OPTIONS=1"+old)
	} else {
		out = append(out, "ASAN_OPTIONS=verify_asan_link_order=0", "HEAPLENS_ASAN_OPTIONS=0")
	}
	out = append(out, "LD_PRELOAD="+preload, "HEAPLENS_DIR="+dir,
		"HEAPLENS_RATE="+strconv.FormatUint(o.Rate, 10))
	if o.Seed != 0 {
		out = append(out, "HEAPLENS_SEED="+strconv.FormatUint(o.Seed, 10))
	}
	if ring := o.RingSize; ring != 0 || o.Rate == 1 {
		if ring == 0 {
			ring = ExactRingSize
		}
		out = append(out, "HEAPLENS_RING_SIZE="+strconv.FormatUint(ring, 10))
	}
	if os.Getenv("HEAPLENS_UNWIND_CHECK") == "1" { // the unwinders' check mode (docs/unwind-format.md), for tests
		out = append(out, "HEAPLENS_UNWIND_CHECK=1")
	}
	if o.NoPython {
		out = append(out, "HEAPLENS_PYTHON=0")
	}
	if soft, hard, ok := sigstart.AddressSpace(); ok && soft != unix.RLIM_INFINITY {
		// The limit heaplens was started with, raised for itself at entry:
		// the library gives it back to the command before the program runs.
		out = append(out, fmt.Sprintf("HEAPLENS_RLIMIT_AS=%d %d", soft, hard))
	}
	if mode, filters, ok := seccompOf("self"); ok {
		// The agent's own (a container's): the library takes only more as the program's.
		out = append(out, fmt.Sprintf("HEAPLENS_SECCOMP=%s %s", mode, filters))
	}
	out = append(out, "HEAPLENS_AGENT_PID="+strconv.Itoa(os.Getpid()))
	if o.NoFollow {
		out = append(out, "HEAPLENS_FOLLOW=0")
	}
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r < 32 {
			return '_'
		}
		return r
	}, s)
}
