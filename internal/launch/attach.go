package launch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/heaplens/heaplens/internal/attach"
	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/collect"
	"github.com/heaplens/heaplens/internal/container"
	"github.com/heaplens/heaplens/internal/inject"
	"github.com/heaplens/heaplens/internal/privdir"
)

// AttachOptions configure one heaplens attach session.
type AttachOptions struct {
	PID      int
	Output   string        // capture path; "" means ./heaplens-attach-COMM-PID.hlc
	Rate     uint64        // bytes; 1 samples every allocation
	Seed     uint64        // 0 draws a random seed
	RingSize uint64        // 0 = library default
	Duration time.Duration // 0: until SIGINT/SIGTERM, heaplens detach, or the process's end
	NoPython bool
	NoFollow bool
	// NativePythonInternals keeps the interpreter's own frames in stacks with Python frames.
	NativePythonInternals bool
	// Library, if set, is the libheaplens-attach*.so to load instead of the
	// embedded one (a sanitizer build, in the tests).
	Library  string
	Version  string
	Log      io.Writer
	Started  func(capture string)
	Observer capture.Observer
}

// AttachResult is what an attach session produced.
type AttachResult struct {
	Capture  string
	Streams  int
	Warnings []string
	PeakRSS  uint64
	Ended    string        // why the session ended, in words
	Window   time.Duration // attach to detach
	Loaded   bool          // the library was loaded by this session (else by an earlier one)
	Pause    time.Duration // how long the thread that loaded it was stopped
	Routed   int           // GOT entries routed to the hooks
}

// Attach profiles a running process until the session ends, then leaves
// it as it was (the library stays loaded and idle; docs/attach.md).
func Attach(o AttachOptions) (*AttachResult, error) {
	if runtime.GOARCH != "amd64" {
		return nil, inject.ErrArch // before the library, which there is none of
	}
	if err := CheckRingSize(o.RingSize); o.RingSize != 0 && err != nil {
		return nil, err
	}
	if o.Library != "" && (!strings.HasPrefix(filepath.Base(o.Library), "libheaplens-attach") || !filepath.IsAbs(o.Library)) {
		return nil, fmt.Errorf("--library %s: give the absolute path of a libheaplens-attach*.so", o.Library)
	}
	if err := attach.Check(o.PID); err != nil {
		return nil, err
	}
	tg, err := container.Open(o.PID)
	if err != nil {
		return nil, err
	}
	// The library and the session directory, as the process names them (lib,
	// inside) and as heaplens does (dir).
	var lib, dir, inside, copy string
	var libDir *container.Dir
	if tg.Root == "" {
		if lib, err = attachLibrary(o.Library); err != nil {
			return nil, err
		}
		if dir, err = sessionDir(); err != nil {
			return nil, err
		}
		defer removeSessionDir(dir)
		inside = dir
	} else {
		if libDir, lib, err = placeLibrary(tg, o.Library); err != nil {
			return nil, err
		}
		defer libDir.Remove()
		// Read once the process's copy is removed, when map_files is not allowed.
		if copy, err = attachLibrary(o.Library); err != nil {
			return nil, err
		}
		sd, err := tg.MakeDir([]string{"/dev/shm", "/tmp"}, 0o700, false)
		if err != nil {
			return nil, fmt.Errorf("the session directory: %w", err)
		}
		defer sd.Remove()
		dir, inside = sd.Host, sd.Inside
	}
	if err := shareDir(dir, o.PID); err != nil {
		return nil, err
	}
	cmdline := processCmdline(o.PID)
	out := o.Output
	if out == "" {
		name := "process"
		if len(cmdline) > 0 {
			name = sanitize(cmdline[0][strings.LastIndexByte(cmdline[0], '/')+1:])
		}
		out = fmt.Sprintf("heaplens-attach-%s-%d.hlc", name, o.PID)
	}
	f, err := privdir.CreateFile(out, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the capture: %w", err)
	}
	defer f.Close()
	meta := capture.Meta{HeaplensVersion: o.Version, Rate: o.Rate, Command: cmdline, AttachedPID: o.PID}
	if tg.OtherPIDs { // the capture's pids are the process's own (collect.Collector.SetForeign)
		meta.AttachedPID, meta.AttachedHostPID = tg.NSPID, o.PID
	}
	w, err := newCapture(f, meta, o.Observer)
	if err != nil {
		return nil, err
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)

	began := time.Now()
	sess, err := attach.Start(o.PID, lib, attach.Settings{
		Dir: inside, Rate: o.Rate, Seed: o.Seed, RingSize: o.RingSize, NoPython: o.NoPython, NoFollow: o.NoFollow,
		Heartbeat: tg.OtherPIDs, ClockOffset: tg.ClockOffset(), Copy: copy,
	}, func(msg string) { fmt.Fprintf(o.Log, "heaplens: %s\n", msg) })
	if libDir != nil {
		libDir.Remove() // loaded (or not): nothing of it stays in the container
	}
	if err != nil {
		f.Close()
		os.Remove(out)
		return nil, err
	}
	res := &AttachResult{Capture: out, Routed: sess.Routed, Loaded: sess.Inject != nil}
	how := "the library was loaded already"
	if sess.Inject != nil {
		res.Pause = sess.Inject.Pause
		how = fmt.Sprintf("loaded the library, one thread paused %.1f ms", float64(res.Pause.Microseconds())/1000)
	}
	where := ""
	if tg.Foreign() {
		where = " " + tg.Where()
		if tg.OtherPIDs {
			where += fmt.Sprintf(", pid %d there", tg.NSPID)
		}
		lib = sess.Library // the library's frames are found by its name in the process
	}
	fmt.Fprintf(o.Log, "heaplens: attached to pid %d%s (%s; %d GOT entries routed)\n", o.PID, where, how, res.Routed)
	if o.Started != nil {
		w.Flush()
		o.Started(out)
	}
	col := collect.New(dir, lib, w)
	col.NativePythonInternals = o.NativePythonInternals
	if tg.Foreign() {
		col.SetForeign(tg)
	}
	defer col.Close()

	var deadline <-chan time.Time
	if o.Duration > 0 {
		deadline = time.After(o.Duration)
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	p := newPoller(col, w)
	p.rss.clock = int64(tg.ClockOffset())
	lastFollow := time.Now()
loop:
	for {
		select {
		case sig := <-signals:
			res.Ended = "detached on " + sig.String()
			break loop
		case <-deadline:
			res.Ended = "detached at the end of --duration " + o.Duration.String()
			break loop
		case <-tick.C:
			if !attach.Running(o.PID) {
				res.Ended = "the process ended"
				break loop
			}
			p.tick()
			if time.Since(lastFollow) >= followEvery {
				var pids []int
				for _, pid := range col.Live() {
					pids = append(pids, pid)
				}
				if err := sess.Follow(pids); err != nil {
					col.Warn(err.Error())
				}
				sess.Beat()
				lastFollow = time.Now()
			}
		}
	}
	stopErr := sess.Stop()
	res.Window = time.Since(began)
	collectErr := p.err
	if collectErr == nil {
		collectErr = col.Poll(true)
	}
	if err := w.Close(); err != nil && collectErr == nil {
		collectErr = err
	}
	res.Streams = col.Streams()
	res.Warnings = col.Warnings()
	res.PeakRSS = p.rss.peak
	if stopErr != nil {
		res.Warnings = append(res.Warnings, "detaching: "+stopErr.Error())
	}
	if collectErr != nil {
		return res, fmt.Errorf("collecting the profile: %w", collectErr)
	}
	return res, nil
}

// followEvery: how often the processes' memory maps are read for modules
// loaded (and fork children made) since, whose GOT entries are routed then.
const followEvery = 250 * time.Millisecond

// Detach ends the attach session in pid (heaplens detach): it asks the
// heaplens attached to it to stop, or ends the session itself when that
// heaplens was killed. It returns the pid of the heaplens asked, 0 if none.
func Detach(pid int) (int, error) {
	copy, _ := AttachLibraryPath() // "" without one: the process's file is read
	return attach.Detach(pid, copy)
}

// shareDir lets the process create its ring in dir when it runs as
// another user than heaplens (root attaching to a service).
func shareDir(dir string, pid int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil {
		return fmt.Errorf("no process %d", pid)
	}
	if int(st.Uid) == os.Geteuid() {
		return nil
	}
	if err := os.Chown(dir, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("letting process %d (user %d) write its ring in %s: %w", pid, st.Uid, dir, err)
	}
	return nil
}

func processCmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// attachLibrary is the path of the library heaplens attach loads: the
// embedded one extracted, or the test's --library.
func attachLibrary(library string) (string, error) {
	if library != "" {
		return library, nil
	}
	return AttachLibraryPath()
}

// placeLibrary copies the library into a private directory of heaplens's
// in the file system of a process in another mount namespace, where it can
// open it, and checks the copy as the extracted library is checked. It
// returns the directory (to remove once the library is loaded) and the
// library's path in the process.
func placeLibrary(tg *container.Target, library string) (*container.Dir, string, error) {
	b, name := attachLibraryBytes, ""
	if library != "" {
		var err error
		if b, err = os.ReadFile(library); err != nil {
			return nil, "", fmt.Errorf("--library: %w", err)
		}
		name = filepath.Base(library)
	}
	if len(b) == 0 {
		return nil, "", ErrNoAttachLibrary
	}
	sum := sha256.Sum256(b)
	if name == "" {
		name = "libheaplens-attach-" + hex.EncodeToString(sum[:8]) + ".so"
	}
	d, err := tg.MakeDir([]string{"/tmp", "/var/tmp", "/dev/shm", "/run"}, 0o711, true)
	if err != nil {
		return nil, "", fmt.Errorf("placing the library: %w", err)
	}
	at, err := d.Create(name, b, 0o755)
	if err == nil {
		err = verifyLibrary(at, b, sum, d.Owner)
	}
	if err != nil {
		d.Remove()
		return nil, "", fmt.Errorf("placing the library in process %d's %s: %w", tg.PID, d.Inside, err)
	}
	return d, d.Inside + "/" + name, nil
}
