package launch

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreflightPrograms checks what the agent says of programs on this
// machine: nothing against its own dynamic programs and scripts, and the
// architecture of an i386 file (the stub) whether run directly or as a
// script's interpreter, through env too. The bullseye root's tests
// (test/e2e/platforms_test.go) run real 32-bit, musl and old-glibc cases.
func TestPreflightPrograms(t *testing.T) {
	if len(library) == 0 {
		t.Fatalf("!!! libheaplens.so is not embedded: build it with make first (make test does)")
	}
	f, err := elf.NewFile(strings.NewReader(string(stub32)))
	if err != nil || f.Class != elf.ELFCLASS32 || f.Machine != elf.EM_386 || f.Type != elf.ET_DYN {
		t.Fatalf("stub32 is not an i386 shared object: %v", err)
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "stub")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(stub, string(stub32))
	write(filepath.Join(dir, "direct.sh"), "#!"+stub+" -x\necho\n")
	write(filepath.Join(dir, "env.sh"), "#!/usr/bin/env -S stub\necho\n")
	write(filepath.Join(dir, "sh.sh"), "#!/bin/sh\necho\n")
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	for _, c := range []struct{ path, want string }{
		{"/bin/sh", ""},
		{"/usr/bin/python3", ""},
		{filepath.Join(dir, "sh.sh"), ""},
		{stub, "it is a 32-bit program for i386, and the library is 64-bit for x86-64"},
		{filepath.Join(dir, "direct.sh"), "its interpreter " + stub + ": it is a 32-bit program"},
		{filepath.Join(dir, "env.sh"), "its interpreter " + stub + ": it is a 32-bit program"},
	} {
		got := notLoadable(c.path, library, 0)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.path, got, c.want)
		}
	}
}
