// Package attach starts and ends a heaplens session in a process that is
// already running: it checks that the process can be attached to, loads
// libheaplens-attach.so into it (internal/inject), steers the library
// through its control block, and routes the malloc family to it
// (internal/gotpatch). docs/attach.md describes the whole.
package attach

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/heaplens/heaplens/internal/elfmod"
	"github.com/heaplens/heaplens/internal/gotpatch"
	"github.com/heaplens/heaplens/internal/inject"
	"github.com/heaplens/heaplens/internal/procmaps"
	"github.com/heaplens/heaplens/internal/ring"
	"golang.org/x/sys/unix"
)

// Settings are a session's.
type Settings struct {
	Dir      string // the session directory, where the process makes its ring
	Rate     uint64
	Seed     uint64
	RingSize uint64 // 0: the library's default
	NoPython bool
	NoFollow bool
	// Heartbeat: heaplens is not in the process's PID namespace, where its
	// pid means nothing; the library learns that heaplens lives from the
	// time Session.Beat writes (every quarter second at least). Beat writes
	// it in every session, for another heaplens to see (agentAlive).
	Heartbeat bool
	// ClockOffset is the process's CLOCK_MONOTONIC less heaplens's (a time
	// namespace's offset), for Beat.
	ClockOffset time.Duration
	// Copy, if set, is heaplens's own copy of the library, read when the
	// process's file cannot be (placed in a container and removed).
	Copy string
	// Sandboxed: the process runs under seccomp filters (Start checks them
	// and sets it), and the library makes only the calls they allow.
	Sandboxed bool
}

// Session is one attach session: in the process attached to and in the
// children it forks meanwhile.
type Session struct {
	PID    int
	Number uint64
	// Library is the path of the library as the process loaded it (by this
	// session or an earlier one).
	Library string
	Inject  *inject.Result // nil when the library was loaded already
	Routed  int            // GOT entries routed in the process at the start

	ctl       uint64 // heaplens_control's address (the same in fork children)
	hooks     []gotpatch.Hook
	beat      time.Duration // Settings.ClockOffset
	heartbeat bool          // Settings.Heartbeat
	procs     map[int]*gotpatch.Patcher
}

// ErrAttached means another heaplens is attached to the process.
type ErrAttached struct{ PID, Agent int }

func (e *ErrAttached) Error() string {
	return fmt.Sprintf("process %d is already attached to by heaplens (pid %d): `heaplens detach %d` ends that first", e.PID, e.Agent, e.PID)
}

// Start attaches to pid: lib is the path of libheaplens-attach.so. slow
// hears of a dlopen that takes long.
func Start(pid int, lib string, set Settings, slow func(string)) (*Session, error) {
	if err := Check(pid); err != nil {
		return nil, err
	}
	s := &Session{PID: pid, procs: map[int]*gotpatch.Patcher{}, beat: set.ClockOffset, heartbeat: set.Heartbeat}
	mod, err := findLibrary(pid, lib)
	if err != nil {
		return nil, err
	}
	set.Sandboxed = filtered(pid)
	if mod != nil {
		if err := checkLoaded(pid, set.Sandboxed); err != nil {
			return nil, err
		}
	} else {
		if s.Inject, err = inject.Load(pid, lib, slow, sandboxCheck(pid, set.Sandboxed)); err != nil {
			return nil, err
		}
		if mod, err = findLibrary(pid, lib); err == nil && mod == nil {
			err = fmt.Errorf("attach: %s loaded, but not found in the memory map of process %d", lib, pid)
		}
		if err != nil {
			return nil, err
		}
	}
	s.Library = strings.TrimSuffix(mod.Path, " (deleted)")
	f, err := openLibrary(pid, mod, set.Copy)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	s.ctl = f.Symbols("heaplens_control")["heaplens_control"]
	f.Close()
	if s.ctl == 0 {
		return nil, fmt.Errorf("attach: %s has no heaplens_control", lib)
	}
	mem, err := procmaps.OpenMem(pid, true)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	defer mem.Close()
	c, err := readControl(mem, s.ctl)
	if err != nil {
		return nil, err
	}
	if c.magic != ring.ControlMagic || c.version != ring.ControlVersion {
		return nil, fmt.Errorf("attach: the library did not start in process %d (it found no malloc below it)", pid)
	}
	s.hooks = c.hooks
	if c.session != 0 {
		if c.agent != os.Getpid() && s.agentAlive(c) {
			return nil, &ErrAttached{PID: pid, Agent: c.agent}
		}
		// Its heaplens is gone (or ended without the library seeing it): the
		// library ends it at its next call, before it starts this one.
		if err := signal(mem, s.ctl, ring.CtlStop, c.session); err != nil {
			return nil, err
		}
	}
	s.Number = max(c.start, c.ended, c.session) + 1
	if err := put(mem, s.ctl+ring.CtlAlive, s.now()); err != nil {
		return nil, err
	}
	if err := writeSettings(mem, s.ctl, set); err != nil {
		return nil, err
	}
	// Routed first, started after: the session's window (its ring's start
	// to the library's end, docs/attach.md) must hold every allocation made
	// meanwhile, and a hook called before the start (the PyMem hooks an
	// earlier session left) would otherwise open it before malloc reaches
	// the library. Routed hooks are idle until the start.
	p, err := gotpatch.New(pid, s.hooks, skipModule)
	if err != nil {
		return nil, err
	}
	s.procs[pid] = p
	if s.Routed, err = p.Patch(); err == nil && s.Routed == 0 {
		err = fmt.Errorf("attach: no GOT entry of process %d leads to the C library's malloc (%d lead to another allocator): heaplens attach cannot reach its allocations", pid, p.Kept)
	}
	if err != nil {
		s.restore()
		return nil, err
	}
	if err := signal(mem, s.ctl, ring.CtlStart, s.Number); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// skipModule: the loader (its allocations must never reach a hook: it runs
// them while it holds its locks) and heaplens's own libraries.
func skipModule(m elfmod.Module) bool {
	b := m.Base()
	return strings.HasPrefix(b, "ld-linux") || strings.HasPrefix(b, "ld-") || strings.HasPrefix(b, "libheaplens")
}

// Follow routes the malloc family in processes of the session that fork
// made (pids) and in modules loaded since the last call.
func (s *Session) Follow(pids []int) error {
	for _, pid := range pids {
		if _, ok := s.procs[pid]; ok || pid == s.PID {
			continue
		}
		p, err := gotpatch.New(pid, s.hooks, skipModule)
		if err != nil {
			continue // gone already
		}
		s.procs[pid] = p
	}
	var errs []error
	for pid, p := range s.procs {
		if _, err := p.Patch(); err != nil && alive(pid) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Beat tells the library in every process of the session that heaplens
// lives (Settings.Heartbeat).
func (s *Session) Beat() {
	if s.Number == 0 {
		return
	}
	now := s.now()
	for pid := range s.procs {
		if mem, err := procmaps.OpenMem(pid, true); err == nil {
			put(mem, s.ctl+ring.CtlAlive, now)
			mem.Close()
		}
	}
}

// agentAlive reports whether the heaplens of the session running in the
// process lives: its heartbeat, which it writes whatever namespace it
// runs in, is recent; for a heaplens that wrote none, its pid (which means
// something only in a PID namespace where it runs).
func (s *Session) agentAlive(c *control) bool {
	if c.alive == 0 {
		return alive(c.agent)
	}
	if int64(s.now()-c.alive) >= int64(heartbeatLost) {
		return false
	}
	// A heaplens in the process's PID namespace (no heartbeat flag), as this
	// one is: its pid says it for sure (it may have been killed a moment ago).
	if c.flags&ring.CtlHeartbeat == 0 && !s.heartbeat {
		return alive(c.agent)
	}
	return true
}

// heartbeatLost is the library's HEARTBEAT_LOST (preload/attach.c).
const heartbeatLost = 5 * time.Second

// now is CLOCK_MONOTONIC as the process reads it.
func (s *Session) now() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano() + int64(s.beat))
}

// Stop ends the session in every process of it: the library is told to
// stop, which it does at the next call of any hook (that is waited for, up
// to a second: a process that calls none meanwhile ends it when it next
// does, or at the next attach), then the GOT entries go back to what they
// held.
func (s *Session) Stop() error {
	for pid := range s.procs {
		s.stopIn(pid)
	}
	deadline := time.Now().Add(time.Second)
	for pid := range s.procs {
		if mem, err := procmaps.OpenMem(pid, false); err == nil {
			for time.Now().Before(deadline) {
				if v, err := mem.Word(s.ctl + ring.CtlSession); err != nil || v != s.Number {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			// No heartbeat: a heaplens attaching next must not take this one,
			// gone, for alive (agentAlive).
			if w, err := procmaps.OpenMem(pid, true); err == nil {
				put(w, s.ctl+ring.CtlAlive, 0)
				w.Close()
			}
			mem.Close()
		}
	}
	return s.restore()
}

// restore puts every GOT entry routed back to what it held.
func (s *Session) restore() error {
	var errs []error
	for pid, p := range s.procs {
		if _, err := p.Restore(); err != nil && alive(pid) {
			errs = append(errs, err)
		}
		p.Close()
	}
	s.procs = map[int]*gotpatch.Patcher{}
	return errors.Join(errs...)
}

func (s *Session) stopIn(pid int) {
	if mem, err := procmaps.OpenMem(pid, true); err == nil {
		signal(mem, s.ctl, ring.CtlStop, s.Number)
		mem.Close()
	}
}

// signal writes a session number to start or stop, then raises the epoch:
// every hook's next call looks at them.
func signal(mem *procmaps.Mem, ctl uint64, field, n uint64) error {
	if err := put(mem, ctl+field, n); err != nil {
		return err
	}
	e, err := mem.Word(ctl + ring.CtlEpoch)
	if err != nil {
		return err
	}
	return put(mem, ctl+ring.CtlEpoch, e+1)
}

// Detach ends the session in pid for `heaplens detach`: when its heaplens
// runs, it is asked to (SIGINT) and its pid returned; when it is gone, the
// session is ended here (agent 0).
func Detach(pid int, copy string) (agent int, err error) {
	mod, err := findAnyLibrary(pid)
	if err != nil {
		return 0, err
	}
	if mod == nil {
		return 0, fmt.Errorf("process %d is not attached to (heaplens attach never loaded its library there)", pid)
	}
	f, err := openLibrary(pid, mod, copy)
	if err != nil {
		return 0, fmt.Errorf("detach: %w", err)
	}
	ctl := f.Symbols("heaplens_control")["heaplens_control"]
	f.Close()
	mem, err := procmaps.OpenMem(pid, true)
	if err != nil {
		return 0, fmt.Errorf("detach: %w", err)
	}
	defer mem.Close()
	c, err := readControl(mem, ctl)
	if err != nil {
		return 0, err
	}
	if c.magic != ring.ControlMagic || c.session == 0 {
		return 0, fmt.Errorf("process %d is not attached to now", pid)
	}
	if alive(c.agent) {
		if err := syscall.Kill(c.agent, syscall.SIGINT); err != nil {
			return 0, fmt.Errorf("detach: asking heaplens (pid %d) to detach: %w", c.agent, err)
		}
		return c.agent, nil
	}
	p, err := gotpatch.New(pid, c.hooks, skipModule)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	if err := signal(mem, ctl, ring.CtlStop, c.session); err != nil {
		return 0, err
	}
	_, err = p.Restore()
	return 0, err
}

// openLibrary opens the library's file in pid, or heaplens's copy of it
// when that cannot be opened and has its name (which holds its hash).
func openLibrary(pid int, mod *elfmod.Module, copy string) (*elfmod.File, error) {
	f, err := mod.Open(pid)
	if err != nil && copy != "" && filepath.Base(copy) == mod.Base() {
		return mod.OpenCopy(copy)
	}
	return f, err
}

// findLibrary returns the mapped module of lib in pid, nil if it is not
// loaded. Another build of the library loaded there is an error: its
// control block may differ.
func findLibrary(pid int, lib string) (*elfmod.Module, error) {
	m, err := findAnyLibrary(pid)
	if err != nil || m == nil {
		return m, err
	}
	want := lib[strings.LastIndexByte(lib, '/')+1:]
	if m.Base() != want {
		return nil, fmt.Errorf("attach: process %d holds %s from another build of heaplens; attach with that heaplens", pid, m.Base())
	}
	return m, nil
}

func findAnyLibrary(pid int) (*elfmod.Module, error) {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	for _, m := range elfmod.Loaded(maps) {
		if strings.HasPrefix(m.Base(), "libheaplens-attach-") {
			return &m, nil
		}
	}
	return nil, nil
}

type control struct {
	magic        uint64
	version      uint32
	start, ended uint64
	session      uint64
	agent        int
	alive        uint64 // the agent's heartbeat, 0 if it wrote none
	flags        uint64
	hooks        []gotpatch.Hook
}

func readControl(mem *procmaps.Mem, at uint64) (*control, error) {
	b := make([]byte, ring.ControlSize)
	if err := mem.ReadAt(b, at); err != nil {
		return nil, fmt.Errorf("attach: reading the control block: %w", err)
	}
	le := binary.LittleEndian
	c := &control{
		magic: le.Uint64(b[ring.CtlMagic:]), version: le.Uint32(b[ring.CtlVersion:]),
		start: le.Uint64(b[ring.CtlStart:]), ended: le.Uint64(b[ring.CtlEnded:]),
		session: le.Uint64(b[ring.CtlSession:]), agent: int(int64(le.Uint64(b[ring.CtlAgentPID:]))),
		alive: le.Uint64(b[ring.CtlAlive:]), flags: le.Uint64(b[ring.CtlFlags:]),
	}
	n := min(int(le.Uint32(b[ring.CtlNHooks:])), ring.ControlHooks)
	for i := 0; i < n; i++ {
		name := b[ring.CtlName+i*ring.ControlNameSize:][:ring.ControlNameSize]
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		c.hooks = append(c.hooks, gotpatch.Hook{
			Name: string(name),
			Hook: le.Uint64(b[ring.CtlHook+8*i:]),
			Real: le.Uint64(b[ring.CtlReal+8*i:]),
		})
	}
	return c, nil
}

func writeSettings(mem *procmaps.Mem, ctl uint64, set Settings) error {
	if len(set.Dir) >= ring.ControlDirSize || !strings.HasPrefix(set.Dir, "/") {
		return fmt.Errorf("attach: session directory %q: not an absolute path under %d bytes", set.Dir, ring.ControlDirSize)
	}
	// Two ranges: the epoch between them only ever grows (a thread that saw
	// an earlier session's epoch must never see it again).
	b := make([]byte, ring.CtlEpoch-ring.CtlAgentPID)
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(os.Getpid()))
	le.PutUint64(b[ring.CtlRate-ring.CtlAgentPID:], set.Rate)
	le.PutUint64(b[ring.CtlSeed-ring.CtlAgentPID:], set.Seed)
	le.PutUint64(b[ring.CtlRingSize-ring.CtlAgentPID:], set.RingSize)
	var flags uint64
	if set.NoPython {
		flags |= ring.CtlNoPython
	}
	if set.NoFollow {
		flags |= ring.CtlNoFollow
	}
	if set.Heartbeat {
		flags |= ring.CtlHeartbeat
	}
	if set.Sandboxed {
		flags |= ring.CtlSandboxed
	}
	le.PutUint64(b[ring.CtlFlags-ring.CtlAgentPID:], flags)
	if err := mem.WriteAt(b, ctl+ring.CtlAgentPID); err != nil {
		return err
	}
	dir := make([]byte, ring.ControlDirSize)
	copy(dir, set.Dir)
	return mem.WriteAt(dir, ctl+ring.CtlDir)
}

func put(mem *procmaps.Mem, at, v uint64) error { return mem.SetWord(at, v) }

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
