package launch

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/heaplens/heaplens/test/testenv"
)

// TestLibraryNeedsGlibc217 reads the symbol versions that the library and
// the attach library, as built by make, and the arm64 library (make
// bin/heaplens-arm64; aarch64's first glibc was 2.17) need from each shared
// library: none
// may be newer than glibc 2.17 (GCC_4.8.0 for libgcc_s), the oldest glibc
// heaplens supports (manylinux2014, docs/platforms.md). It fails when a
// newly used libc function exists only at a newer version; preload/glibc217.h
// says how to pin one.
func TestLibraryNeedsGlibc217(t *testing.T) {
	arm, _ := os.ReadFile("lib-arm64/libheaplens.so")
	for _, l := range []struct {
		name string
		b    []byte
	}{{"libheaplens.so", library}, {"libheaplens-attach.so", attachLibraryBytes}, {"lib-arm64/libheaplens.so", arm}} {
		if len(l.b) == 0 {
			t.Errorf("!!! %s is not embedded: build it with make first (make test does); its glibc versions are NOT checked", l.name)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(l.b))
		if err != nil {
			t.Fatal(err)
		}
		if needs, _ := f.DynamicVersionNeeds(); len(needs) == 0 { // not built as make builds it
			t.Errorf("%s needs no symbol versions at all", l.name)
		}
		bad, err := testenv.NewerThanGlibc217(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range bad {
			t.Errorf("%s needs %s, newer than glibc 2.17 allows", l.name, v)
		}
	}
}
