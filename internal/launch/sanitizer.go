package launch

import (
	"debug/elf"
	"path/filepath"
	"strings"
)

// sanitizerRuntimes are the sanitizers whose runtime replaces malloc and
// must be the first library of the process: heaplens's library in front of
// it breaks the program (ASan refuses to start, TSan and LSan crash). By
// the prefix of the runtime's shared object (GCC's, then Clang's), and by a
// symbol that an executable with the runtime linked in exports.
// UndefinedBehaviorSanitizer alone has no allocator and is profiled.
var sanitizerRuntimes = []struct{ lib, clang, init, name string }{
	{"libasan.so", "libclang_rt.asan", "__asan_init", "AddressSanitizer"},
	{"libtsan.so", "libclang_rt.tsan", "__tsan_init", "ThreadSanitizer"},
	{"liblsan.so", "libclang_rt.lsan", "__lsan_init", "LeakSanitizer"},
	{"libmsan.so", "libclang_rt.msan", "__msan_init", "MemorySanitizer"},
	{"libhwasan.so", "libclang_rt.hwasan", "__hwasan_init", "HWAddressSanitizer"},
}

// sanitizerIn names the allocating sanitizer the program at path is built
// with, or the one LD_PRELOAD (in env) brings, and its runtime; "" if none.
func sanitizerIn(path string, env []string) (name, runtime string) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' }) {
				if n := sanitizerLib(filepath.Base(p)); n != "" {
					return n, p
				}
			}
		}
	}
	f, err := elf.Open(path)
	if err != nil {
		return "", "" // not ELF (a script): the library sees to what it runs
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if n := sanitizerLib(l); n != "" {
			return n, l
		}
	}
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF {
			continue
		}
		for _, r := range sanitizerRuntimes {
			if s.Name == r.init {
				return r.name, "linked in (" + r.init + ")"
			}
		}
	}
	return "", ""
}

func sanitizerLib(base string) string {
	for _, r := range sanitizerRuntimes {
		if strings.HasPrefix(base, r.lib) || strings.HasPrefix(base, r.clang) {
			return r.name
		}
	}
	return ""
}

// sanitizerWhy says why a program built with a sanitizer runs unprofiled.
func sanitizerWhy(command, name, runtime string) string {
	return command + " is built with " + name + " (" + runtime + "), whose runtime replaces malloc and must come first in the process: " +
		"heaplens cannot stand in front of it, so it ran unprofiled"
}
