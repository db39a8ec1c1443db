package programs

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// cacheDir is where builds outside the clone are kept across runs (cargo's
// registry and target directory), as scripts/deps.sh fills it.
func cacheDir(t *testing.T) string {
	t.Helper()
	dir, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no cache directory for the Rust build: %v", err)
	}
	return filepath.Join(dir, "heaplens", "test-programs")
}

// rustProgram is a cargo project with a crate from crates.io (fnv), whose
// fill_buffers allocates rustBuffers blocks of rustBufferBytes and nothing
// else: at --rate 1 the profile holds exactly that there.
func rustProgram() program {
	const rustBuffers, rustBufferBytes = 64, 10_000 // as in rustalloc/src/main.rs
	return program{
		name:  "rust-cargo",
		needs: []string{"cargo"},
		build: func(t *testing.T, _ string) []string {
			cache := cacheDir(t)
			target := filepath.Join(cache, "target")
			// --locked: the crate's version is the one in Cargo.lock.
			mustRun(t, "", []string{"CARGO_HOME=" + filepath.Join(cache, "cargo"), "CARGO_TARGET_DIR=" + target},
				"cargo", "build", "--quiet", "--release", "--locked", "--manifest-path", filepath.Join(sources, "rustalloc", "Cargo.toml"))
			return []string{filepath.Join(target, "release", "rustalloc")}
		},
		known: func(t *testing.T, o outcome) {
			h := fnv.New64a()
			for i := 0; i < rustBuffers; i++ {
				b := make([]byte, rustBufferBytes)
				for j := range b {
					b[j] = byte((i*31 + j*7) % 251)
				}
				h.Write(b)
			}
			wantOutput(fmt.Sprintf("%d buffers of %d bytes, fnv1a64 %016x\n", rustBuffers, rustBufferBytes, h.Sum64()), "")(t, o)
		},
		after: exactSite("rustalloc::fill_buffers", rustBuffers*rustBufferBytes, rustBuffers),
	}
}

// threadsProgram runs threads1000, which creates 1,000 threads at once with
// stacks of the given size, each mallocing threadBlock bytes in
// thread_block. Where glibc accepts the size bare, every way must create
// them all, and at --rate 1 the profile holds exactly their blocks there.
func threadsProgram(stack int) program {
	const threads, threadBlock = 1000, 3000 // as in threads1000.c
	return program{
		name:  fmt.Sprintf("threads-1000x%dKiB", stack>>10),
		needs: []string{"gcc"},
		build: func(t *testing.T, dir string) []string {
			bin := filepath.Join(dir, "threads1000")
			mustRun(t, "", nil, "gcc", "-O2", "-g", "-pthread", "-o", bin, filepath.Join(sources, "threads1000.c"))
			return []string{bin, strconv.Itoa(stack)}
		},
		known: func(t *testing.T, o outcome) {
			if o.code != 0 && strings.Contains(o.stdout, "pthread_create") {
				t.Skipf("glibc does not take a %d-byte stack bare, so nothing to compare: %s", stack, o.stdout)
			}
			wantOutput(fmt.Sprintf("stack %d: created %d threads, %d blocks of %d bytes checked\n", stack, threads, threads, threadBlock), "")(t, o)
		},
		after: exactSite("thread_block", threads*threadBlock, threads),
	}
}

// exactSite checks, in the --rate 1 run, that fn allocated exactly bytes
// in objects blocks.
func exactSite(fn string, bytes, objects int) func(*testing.T, outcome, string, string) {
	return func(t *testing.T, o outcome, _, _ string) {
		if o.way != exact {
			return
		}
		d := profile(t, o.capture, "allocs")
		noDrops(t, d)
		s := siteOf(d, fn)
		if s.bytes != float64(bytes) || s.objects != float64(objects) {
			t.Errorf("%s: %s allocated %.0f bytes in %.0f blocks, want exactly %d in %d", o.way.name, fn, s.bytes, s.objects, bytes, objects)
		}
	}
}
