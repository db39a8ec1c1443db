package elfmod

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/procmaps"
)

// Another process's modules, read as heaplens attach reads them: in a
// running sleep(1), libc's GOT entries for malloc and free hold libc's own
// malloc and free (nothing interposes them), as its dynamic symbols say.
func TestSleepLibc(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	var libc *Module
	for deadline := time.Now().Add(5 * time.Second); libc == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		maps, err := procmaps.Read(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range Loaded(maps) {
			if m.Base() == "libc.so.6" {
				libc = &m
			}
		}
	}
	if libc == nil {
		t.Fatal("sleep never mapped libc.so.6")
	}
	f, err := libc.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms := f.Symbols("malloc", "free", "dlopen")
	if syms["malloc"] < libc.Lo || syms["malloc"] >= libc.Hi || syms["free"] == 0 || syms["dlopen"] == 0 {
		t.Fatalf("libc's symbols: %v (libc at %#x-%#x)", syms, libc.Lo, libc.Hi)
	}
	slots, err := f.Slots(map[string]bool{"malloc": true, "free": true})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := procmaps.OpenMem(pid, false)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	seen := map[string]bool{}
	for _, s := range slots {
		v, err := mem.Word(s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if v != syms[s.Name] {
			t.Errorf("libc's GOT entry for %s at %#x holds %#x, want %#x", s.Name, s.Addr, v, syms[s.Name])
		}
		seen[s.Name] = true
	}
	if !seen["malloc"] || !seen["free"] {
		t.Errorf("GOT entries found: %v; want malloc and free", slots)
	}
}

// Malformed ELF files (the process's files are its own) give errors, not panics.
func FuzzNewFile(f *testing.F) {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(self[:min(len(self), 1<<16)])
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return
		}
		file := &File{File: ef}
		file.Symbols("malloc")
		file.Slots(map[string]bool{"malloc": true})
	})
}
