package procmaps

import (
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1311 /usr/bin/cat
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e2d200000-7f1e2d228000 r-xp 00028000 fd:10 4242   /opt/my lib/libx.so (deleted)
7ffd1a3e0000-7ffd1a401000 rw-p 00000000 00:00 0                          [stack]
`
	ms, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{0x55d0c0a00000, 0x55d0c0a02000, "r--p", 0, 8<<32 | 1, 1311, "/usr/bin/cat"},
		{0x7f1e2c000000, 0x7f1e2c021000, "rw-p", 0, 0, 0, ""},
		{0x7f1e2d200000, 0x7f1e2d228000, "r-xp", 0x28000, 0xfd<<32 | 0x10, 4242, "/opt/my lib/libx.so (deleted)"},
		{0x7ffd1a3e0000, 0x7ffd1a401000, "rw-p", 0, 0, 0, "[stack]"},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %d mappings, want %d", len(ms), len(want))
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, ms[i], want[i])
		}
	}
	if !ms[2].Exec() || ms[0].Exec() || !ms[0].File() || ms[3].File() {
		t.Error("Exec/File wrong")
	}
	for _, bad := range []string{"zz-10 r--p 0 0:0 0\n", "10-5 r--p 0 0:0 0\n", "10-20 r--p\n"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The test's own memory: a variable's bytes read back through /proc/self/mem.
func TestMemSelf(t *testing.T) {
	ms, err := Read(os.Getpid())
	if err != nil || len(ms) == 0 {
		t.Fatalf("Read: %v, %d mappings", err, len(ms))
	}
	m, err := OpenMem(os.Getpid(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	buf := []byte("heaplens\x00tail")
	addr := uint64(uintptrOf(&buf[0]))
	if s, err := m.String(addr, 64); err != nil || s != "heaplens" {
		t.Fatalf("String = %q, %v", s, err)
	}
	if err := m.SetWord(addr, 0x6f6c6c6568); err != nil { // "hello\0\0\0"
		t.Fatal(err)
	}
	if string(buf[:5]) != "hello" {
		t.Fatalf("after SetWord: %q", buf)
	}
	if _, err := m.Word(1 << 62); err == nil {
		t.Error("reading an unmapped address gave no error")
	}
}
