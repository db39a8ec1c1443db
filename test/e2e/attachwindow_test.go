package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/elfmod"
	"github.com/heaplens/heaplens/internal/procmaps"
	"github.com/heaplens/heaplens/internal/ring"
)

// TestAttachWindowHeld: a session's window holds every allocation made in
// it, however late heaplens runs. heaplens is stopped (SIGSTOP) for 400 ms
// the moment it raises the start epoch, as a loaded machine may stop it;
// the PyMem hooks that the first session left open the next sessions at
// once, so any routing done after the start would leave malloc's blocks
// of the held time unrecorded inside the window (4 of the 512 KiB leaks,
// beyond checkLeakFound's tolerance of one). On Debian's static
// python3, on a pyenv CPython with libpython shared and on the sid root's
// 3.15 (heaplens inside the root).
func TestAttachWindowHeld(t *testing.T) {
	for _, py := range everyPython(t) {
		if py.name != "debian-python3" && py.name != "pyenv-3.13" && py.name != "sid-3.15" {
			continue
		}
		t.Run(py.name, func(t *testing.T) {
			t.Parallel()
			w := py.where(t)
			bare, tg := twinsWhere(t, w, py.path, w.workload(t, "pyserver.py"), "10")
			attachSessionsWhere(t, w, tg, 1, 500*time.Millisecond, "512KiB")
			epoch := controlWord(t, tg.pid(), ring.CtlEpoch)
			const hold = 400 * time.Millisecond
			for i := 0; i < 2; i++ {
				capPath, capArg := w.file(fmt.Sprintf("held-%d.hlc", i))
				argv := append(w.attacher(tg.pid()), "attach", strconv.Itoa(tg.pid()),
					"--rate", "1", "--seed", strconv.Itoa(i+1), "-o", capArg, "-q")
				heldSession(t, epoch, hold, argv...)
				if from, until := attachWindow(t, capPath, tg.pid()); until-from < int64(hold+200*time.Millisecond) {
					t.Fatalf("%s: a %.3f s window: heaplens was not held inside it, the test proves nothing", capPath, float64(until-from)/1e9)
				}
				checkLeakFound(t, capPath, tg.pid(), tg.log, 1)
			}
			sameAsBare(t, bare, tg)
		})
	}
}

// heldSession runs heaplens attach (argv; nsenter and chroot exec it in
// the same process), stops it for hold as soon as
// epoch (the target's control block word) rises, lets it run 300 ms more
// and ends the session with SIGINT.
func heldSession(t *testing.T, epoch func() uint64, hold time.Duration, argv ...string) {
	t.Helper()
	was := epoch()
	cmd := exec.Command(argv[0], argv[1:]...)
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); epoch() == was; {
		if time.Now().After(deadline) {
			t.Fatalf("%v: no session started in 30 s\n%s", argv, errb.String())
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(hold)
	cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("%v: still running a minute after SIGINT\n%s", argv, errb.String())
	}
}

// controlWord returns a reader of the word at off in the control block of
// the attach library loaded in pid (docs/attach.md, "The control block").
func controlWord(t *testing.T, pid int, off uint64) func() uint64 {
	t.Helper()
	maps, err := procmaps.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	var ctl uint64
	for _, m := range elfmod.Loaded(maps) {
		if strings.HasPrefix(m.Base(), "libheaplens-attach-") {
			f, err := m.Open(pid)
			if err != nil {
				t.Fatal(err)
			}
			ctl = f.Symbols("heaplens_control")["heaplens_control"]
			f.Close()
		}
	}
	if ctl == 0 {
		t.Fatalf("no heaplens_control in process %d", pid)
	}
	mem, err := procmaps.OpenMem(pid, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return func() uint64 {
		v, err := mem.Word(ctl + off)
		if err != nil {
			t.Fatalf("reading process %d's control block: %v", pid, err)
		}
		return v
	}
}
