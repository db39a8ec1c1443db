package programs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/size"
	"github.com/heaplens/heaplens/test/testenv"
)

// As in rustjemalloc/src/main.rs: fill_buffers allocates 64 blocks of
// 10,000 bytes, churn 1,000 of 5,000.
const jeBuffers, jeBufferBytes, jeChurn, jeChurnBytes = 64, 10_000, 1000, 5000

// rustJemallocAnswer is the line rustjemalloc prints, computed here.
func rustJemallocAnswer() string {
	sum := 0
	for i := 0; i < jeChurn; i++ {
		sum += i % 251
	}
	for i := 0; i < jeBuffers; i++ {
		sum += (i*31 + (jeBufferBytes-1)*7) % 251
	}
	return fmt.Sprintf("%d buffers of %d bytes, checksum %d\n", jeBuffers, jeBufferBytes, sum)
}

// debianJemalloc is the shared jemalloc the system build links to.
const debianJemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so"

// rustJemallocPrograms are a Rust program with tikv-jemallocator as its
// global allocator, built two ways (docs/allocators.md):
//   - as the crate builds by default, jemalloc compiled into the executable
//     under the _rjem_ prefix, called directly: heaplens cannot see its
//     allocations, and the run says so, naming what its mappings came to;
//   - against Debian's shared libjemalloc (JEMALLOC_OVERRIDE, the crate's
//     unprefixed feature): the executable imports mallocx, sdallocx…, which
//     heaplens routes through their GOT entries: exact at --rate 1.
func rustJemallocPrograms() []program {
	build := func(variant string, env []string, features ...string) func(t *testing.T, _ string) []string {
		return func(t *testing.T, _ string) []string {
			cache := cacheDir(t)
			target := filepath.Join(cache, "target-jemalloc-"+variant)
			args := append([]string{"build", "--quiet", "--release", "--locked", "--manifest-path",
				filepath.Join(sources, "rustjemalloc", "Cargo.toml")}, features...)
			mustRun(t, "", append([]string{"CARGO_HOME=" + filepath.Join(cache, "cargo"), "CARGO_TARGET_DIR=" + target}, env...), "cargo", args...)
			return []string{filepath.Join(target, "release", "rustjemalloc")}
		}
	}
	static := program{
		name:  "rust-jemalloc-static",
		needs: []string{"cargo"},
		build: build("static", nil),
		known: wantOutput(rustJemallocAnswer(), ""),
		after: func(t *testing.T, o outcome, _, _ string) {
			if o.way != exact {
				return
			}
			d := profile(t, o.capture, "allocs")
			noDrops(t, d)
			if s := siteOf(d, "rustjemalloc::fill_buffers"); s.bytes != 0 {
				t.Errorf("fill_buffers shows %.0f bytes: the executable's own jemalloc was seen after all, and the note is wrong", s.bytes)
			}
			// What its jemalloc mapped: mappings sampled with a stack through its _rjem_ functions, each once.
			m := profile(t, o.capture, "allocs", "--kind", "mmap")
			var bytes, maps float64
			for i, st := range m.Samples.Stack {
				for _, f := range m.Stacks[st] {
					if strings.HasPrefix(m.Frames[f].Name, "_rjem_") {
						bytes += float64(m.Samples.Bytes[i])
						maps += float64(m.Samples.Objects[i])
						break
					}
				}
			}
			want := fmt.Sprintf("own jemalloc are not seen: only its mappings are, %s in %.0f sampled mappings", size.FormatSize(uint64(bytes)), maps)
			if bytes < 1<<20 || !strings.Contains(strings.Join(d.Notes, "\n"), want) {
				t.Errorf("the report does not say %q (jemalloc mapped %.0f bytes):\n%s", want, bytes, strings.Join(d.Notes, "\n"))
			}
		},
	}
	system := program{
		name:  "rust-jemalloc-shared",
		needs: []string{"cargo"},
		build: func(t *testing.T, dir string) []string {
			if _, err := os.Stat(debianJemalloc); err != nil {
				testenv.Missing(t, "%s is not installed (scripts/deps.sh installs libjemalloc-dev): this case does NOT run", debianJemalloc)
				t.FailNow()
			}
			return build("shared", []string{"JEMALLOC_OVERRIDE=" + debianJemalloc}, "--features", "system")(t, dir)
		},
		known: wantOutput(rustJemallocAnswer(), ""),
		after: func(t *testing.T, o outcome, dir, bareDir string) {
			exactSite("rustjemalloc::fill_buffers", jeBuffers*jeBufferBytes, jeBuffers)(t, o, dir, bareDir)
			exactSite("rustjemalloc::churn", jeChurn*jeChurnBytes, jeChurn)(t, o, dir, bareDir)
			if o.way == exact {
				if s := siteOf(profile(t, o.capture, "leaks"), "rustjemalloc::fill_buffers", "rustjemalloc::churn"); s.bytes != 0 {
					t.Errorf("%.0f bytes held at exit by blocks freed through sdallocx", s.bytes)
				}
			}
		},
	}
	return []program{static, system}
}
