package gotpatch

import (
	"os/exec"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/elfmod"
	"github.com/heaplens/heaplens/internal/procmaps"
)

// In a sleeping sleep(1): every GOT entry for malloc and free that holds
// libc's is pointed at a stand-in hook, then put back; the process, which
// calls neither meanwhile, exits as it would.
func TestPatchRestore(t *testing.T) {
	cmd := exec.Command("sleep", "2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	time.Sleep(200 * time.Millisecond)
	maps, err := procmaps.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	real := map[string]uint64{}
	for _, m := range elfmod.Loaded(maps) {
		if m.Base() == "libc.so.6" {
			f, err := m.Open(pid)
			if err != nil {
				t.Fatal(err)
			}
			real = f.Symbols("malloc", "free")
			f.Close()
		}
	}
	hooks := []Hook{{"malloc", 0x1111000, real["malloc"]}, {"free", 0x2222000, real["free"]}}
	noLoader := func(m elfmod.Module) bool { return m.Base() == "ld-linux-x86-64.so.2" }
	p, err := New(pid, hooks, noLoader)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n, err := p.Patch()
	if err != nil || n < 2 {
		t.Fatalf("Patch: %d entries, %v; want at least libc's own two", n, err)
	}
	if again, err := p.Patch(); err != nil || again != 0 {
		t.Errorf("a second Patch routed %d more (%v); modules are done once", again, err)
	}
	routed := func(want map[uint64]bool) int {
		c := 0
		for _, s := range p.slots {
			v, err := p.mem.Word(s.addr)
			if err != nil {
				t.Fatal(err)
			}
			if want[v] {
				c++
			}
		}
		return c
	}
	if c := routed(map[uint64]bool{0x1111000: true, 0x2222000: true}); c != n {
		t.Errorf("%d of %d entries hold a hook", c, n)
	}
	back, err := p.Restore()
	if err != nil || back != n {
		t.Errorf("Restore put back %d of %d (%v)", back, n, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("sleep after the entries went back: %v", err)
	}
}
