package e2e

import (
	"debug/elf"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// maxStaticTLS bounds the library's static TLS block, which glibc carves out
// of every thread's stack (docs/preload-safety.md): a few hundred bytes.
const maxStaticTLS = 1024

// The preloaded library's static TLS stays small: its PT_TLS segment.
func TestStaticTLSSize(t *testing.T) {
	so := filepath.Join(root, "internal", "launch", "lib", "libheaplens.so")
	f, err := elf.Open(so)
	if err != nil {
		t.Fatalf("the library (make builds it): %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			t.Logf("static TLS: %d bytes", p.Memsz)
			if p.Memsz > maxStaticTLS {
				t.Fatalf("libheaplens.so takes %d bytes of static TLS from every thread's stack, want at most %d", p.Memsz, maxStaticTLS)
			}
			return
		}
	}
	t.Fatalf("%s has no PT_TLS segment: the fast path's countdown is thread-local", so)
}

var threadCounts = regexp.MustCompile(`stack \d+: (\d+) threads by size, (\d+) on own stacks`)

// Threads on the smallest stacks glibc accepts start as they do bare, and
// every one of their allocations is in the profile at --rate 1.
func TestSmallStacks(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "smallstacks.c")
	sizes := []string{"16384", "20480", "24576", "32768", "65536"}
	bare := run(t, time.Minute, bin, sizes...)
	if bare.code != 0 {
		t.Fatalf("smallstacks fails bare: exit %d\n%s", bare.code, bare.stdout)
	}
	t.Logf("bare:\n%s", bare.stdout)
	started := 0
	for _, m := range threadCounts.FindAllStringSubmatch(bare.stdout, -1) {
		a, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		started += a + b
	}
	if !strings.Contains(bare.stdout, "stack 16384: 200 threads by size") {
		t.Fatalf("glibc refuses 16 KiB stacks bare: the test shows nothing here\n%s", bare.stdout)
	}
	for _, rate := range []string{"512KiB", "1"} {
		capPath, res := profile(t, dir, []string{"-q", "--rate", rate, "--ring-size", "64MiB"}, append([]string{bin}, sizes...)...)
		if res.code != 0 || res.stdout != bare.stdout || res.stderr != bare.stderr {
			t.Fatalf("rate %s: exit %d, stdout %q, stderr %q; bare: %q, %q", rate, res.code, res.stdout, res.stderr, bare.stdout, bare.stderr)
		}
		if rate != "1" {
			continue
		}
		if text := reportText(t, capPath); !strings.Contains(text, "dropped: 0\n") {
			t.Fatalf("records were dropped: the exact check cannot be made\n%s", text)
		}
		got, want := report(t, capPath, "allocs").site("in_thread"), float64(started*1000)
		if got != want {
			t.Fatalf("in_thread allocated %.0f bytes at --rate 1, want %.0f (%d threads × 1000)", got, want, started)
		}
	}
}

func reportText(t *testing.T, capPath string) string {
	t.Helper()
	res := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "allocs")
	if res.code != 0 {
		t.Fatalf("report: %d %s", res.code, res.stderr)
	}
	return res.stdout
}
