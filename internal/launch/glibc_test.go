package launch

import (
	"bytes"
	"debug/elf"
	"strconv"
	"strings"
	"testing"
)

// TestLibraryNeedsGlibc217 reads the symbol versions that the library and
// the attach library, as built by make, need from each shared library: none
// may be newer than glibc 2.17 (GCC_4.8.0 for libgcc_s), the oldest glibc
// heaplens supports (manylinux2014, docs/platforms.md). It fails when a
// newly used libc function exists only at a newer version; preload/glibc217.h
// says how to pin one.
func TestLibraryNeedsGlibc217(t *testing.T) {
	for _, l := range []struct {
		name string
		b    []byte
	}{{"libheaplens.so", library}, {"libheaplens-attach.so", attachLibrary}} {
		if len(l.b) == 0 {
			t.Errorf("!!! %s is not embedded: build it with make first (make test does); its glibc versions are NOT checked", l.name)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(l.b))
		if err != nil {
			t.Fatal(err)
		}
		needs, err := f.DynamicVersionNeeds()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, need := range needs {
			for _, v := range need.Needs {
				n++
				if newer(v.Dep, "GLIBC_", []int{2, 17}) || newer(v.Dep, "GCC_", []int{4, 8, 0}) {
					t.Errorf("%s needs %s from %s, newer than glibc 2.17 allows", l.name, v.Dep, need.Name)
				}
			}
		}
		if n == 0 { // a library without version needs was not built as make builds it
			t.Errorf("%s needs no symbol versions at all", l.name)
		}
	}
}

// newer reports whether version v (PREFIX1.2.3) is newer than limit.
func newer(v, prefix string, limit []int) bool {
	rest, ok := strings.CutPrefix(v, prefix)
	if !ok {
		return false
	}
	for i, s := range strings.Split(rest, ".") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return true // not a release version: not one an old system has
		}
		l := 0
		if i < len(limit) {
			l = limit[i]
		}
		if n != l {
			return n > l
		}
	}
	return false
}
