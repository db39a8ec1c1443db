package testenv

import (
	"debug/elf"
	"fmt"
	"strconv"
	"strings"
)

// NewerThanGlibc217 lists the symbol versions an ELF file needs that glibc
// 2.17 (with libgcc_s of GCC 4.8), the oldest system heaplens supports,
// does not have (docs/platforms.md), as "VERSION from LIBRARY". A static
// program needs none.
func NewerThanGlibc217(f *elf.File) ([]string, error) {
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, need := range needs {
		for _, v := range need.Needs {
			if newer(v.Dep, "GLIBC_", []int{2, 17}) || newer(v.Dep, "GCC_", []int{4, 8, 0}) {
				out = append(out, fmt.Sprintf("%s from %s", v.Dep, need.Name))
			}
		}
	}
	return out, nil
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
