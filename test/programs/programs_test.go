package programs

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// program is one case: a program run bare, then under heaplens at the
// default rate and at --rate 1, each way in a fresh working directory.
type program struct {
	name  string
	needs []string // executables on PATH
	// build makes, once, what every way runs (in dir, outside the clone),
	// and returns the command; nil runs argv.
	build func(t *testing.T, dir string) []string
	argv  []string
	env   []string
	// prepare puts the files the program reads into its working directory.
	prepare func(t *testing.T, dir string)
	// known checks the bare run's answer, which every way then must repeat.
	known func(t *testing.T, o outcome)
	// after checks each run under heaplens beyond its output (its
	// profile, the files it wrote), given the bare run's working directory.
	after func(t *testing.T, o outcome, dir, bareDir string)
}

func TestPrograms(t *testing.T) {
	for _, p := range programs() {
		t.Run(p.name, func(t *testing.T) { p.run(t) })
	}
}

func (p program) run(t *testing.T) {
	if !need(t, p.needs...) {
		return
	}
	argv := p.argv
	if p.build != nil {
		argv = p.build(t, t.TempDir())
	}
	capDir := t.TempDir()
	var b outcome
	var bareDir string
	for _, w := range allWays {
		dir := filepath.Join(t.TempDir(), "work") // the same name every way: programs may print it
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if p.prepare != nil {
			p.prepare(t, dir)
		}
		o := runIn(t, w, dir, capDir, p.env, argv...)
		t.Logf("%s: exit %d in %v", w.name, o.code, o.elapsed.Round(10*time.Millisecond))
		if w == bare {
			b, bareDir = o, dir
			if o.code != 0 {
				t.Logf("bare run exits %d:\n%s", o.code, tail(o.stdout+o.stderr, 20))
			}
			p.known(t, o)
			if t.Failed() {
				t.Fatalf("the bare run does not give the known answer: nothing to compare with\nstdout:\n%s\nstderr:\n%s", tail(o.stdout, 30), tail(o.stderr, 30))
			}
			continue
		}
		same(t, b, o, nil)
		if p.after != nil && o.code == b.code {
			p.after(t, o, dir, bareDir)
		}
	}
}

func programs() []program {
	ps := []program{
		{
			name:  "node-hello",
			needs: []string{"node"},
			argv:  []string{"node", "-e", "console.log(1)"},
			known: wantOutput("1\n", ""),
		},
		{
			// Node starts threads of its own (its platform's workers, libuv's
			// pool) and here four worker_threads.
			name:  "node-workers",
			needs: []string{"node"},
			argv:  []string{"node", filepath.Join(sources, "workers.js")},
			known: wantOutput(workersAnswer(100000, 4), ""),
		},
		{
			name:  "java-implicit-null-checks",
			needs: []string{"javac", "java", "strace"},
			build: func(t *testing.T, dir string) []string {
				mustRun(t, "", nil, "javac", "-d", dir, filepath.Join(sources, "NullChecks.java"))
				argv := []string{"java", "-cp", dir, "NullChecks"}
				// The case is about the JVM's own SIGSEGVs: it must take
				// some at 0xc, where an int[]'s length is read through null.
				trace := filepath.Join(dir, "strace.txt")
				mustRun(t, "", nil, "strace", append([]string{"-f", "-qq", "-e", "trace=none", "-e", "signal=SIGSEGV", "-o", trace}, argv...)...)
				b, err := os.ReadFile(trace)
				if err != nil {
					t.Fatal(err)
				}
				n := strings.Count(string(b), "si_addr=0xc}")
				if n == 0 {
					t.Fatalf("bare, the JVM took no SIGSEGV at 0xc (strace -e signal=SIGSEGV): the case tests nothing\n%s", tail(string(b), 20))
				}
				t.Logf("bare, the JVM takes %d SIGSEGVs reading a null array's length", n)
				return argv
			},
			known: wantOutput(nullChecksAnswer(3_000_000, 1000, 7), "done\n"),
		},
		{
			name:  "git",
			needs: []string{"git", "bash"},
			argv:  []string{"bash", filepath.Join(sources, "git.sh")},
			// A fixed identity and dates: every commit hash is the same every
			// run. HOME is the working directory: no user configuration.
			env: []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=.", "GIT_AUTHOR_NAME=Ada", "GIT_AUTHOR_EMAIL=ada@example.com",
				"GIT_COMMITTER_NAME=Ada", "GIT_COMMITTER_EMAIL=ada@example.com",
				"GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z"},
			known: func(t *testing.T, o outcome) {
				wantCode(t, o, 0)
				insertions := 0
				for i := 1; i <= 20; i++ {
					insertions += 50 * i
				}
				wantLines(t, o.stdout, fmt.Sprintf(" 20 files changed, %d insertions(+)", insertions),
					fmt.Sprintf(" 20 files changed, 19 insertions(+), %d deletions(-)", 19+1000), "2\none\n2\n3\nstatus: 0 changes")
			},
		},
		{
			name:  "gcc",
			needs: []string{"gcc"},
			argv:  []string{"gcc", "-O2", "-Wall", "-o", "hello", "hello.c"},
			prepare: func(t *testing.T, dir string) {
				copyFile(t, filepath.Join(sources, "hello.c"), filepath.Join(dir, "hello.c"))
			},
			known: func(t *testing.T, o outcome) {
				wantCode(t, o, 0)
				wantLines(t, o.stderr, "warning: unused variable ‘unused’")
			},
			after: func(t *testing.T, o outcome, dir, bareDir string) {
				// The same program, byte for byte, that runs and prints its answer.
				if h, b := digest(t, filepath.Join(dir, "hello")), digest(t, filepath.Join(bareDir, "hello")); h != b {
					t.Errorf("%s: gcc's output differs from the bare run's (sha256 %s, bare %s)", o.way.name, h, b)
				}
				sum := 0
				for i := 1; i <= 1000; i++ {
					sum += i * i
				}
				if out := mustRun(t, dir, nil, "./hello"); out != fmt.Sprintf("hello, sum of squares to 1000 is %d\n", sum) {
					t.Errorf("%s: the program gcc built prints %q", o.way.name, out)
				}
				// The driver runs cc1, as and, through collect2, ld: each is
				// a profiled process of the tree.
				got := processes(profile(t, o.capture, "allocs"))
				for _, want := range []string{"gcc", "cc1", "as", "collect2", "ld"} {
					if !slices.Contains(got, want) {
						t.Errorf("%s: no %s among the profiled processes %v", o.way.name, want, got)
					}
				}
			},
		},
		{
			name:  "perl",
			needs: []string{"perl"},
			argv:  []string{"perl", filepath.Join(sources, "count.pl")},
			known: wantOutput(perlAnswer(), "1.414,1.732,2.236\n"),
		},
		{
			name:  "sqlite3",
			needs: []string{"sqlite3"},
			argv:  []string{"sqlite3", "-batch", "-bail", "test.db", ".read " + filepath.Join(sources, "queries.sql")},
			known: wantOutput(sqliteAnswer(20000), ""),
		},
		{
			// xz compresses with two threads (a block each) and decompresses; the
			// checksums are the answer: the file's own, and the same
			// compressed bytes every way.
			name:  "xz",
			needs: []string{"xz", "sha256sum", "bash"},
			argv:  []string{"bash", "-c", "set -e -o pipefail; xz -6 -T2 --block-size=1MiB -k data; xz -t data.xz; xz -dc data.xz | sha256sum; sha256sum < data.xz"},
			prepare: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "data"), xzData(), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			known: func(t *testing.T, o outcome) {
				wantCode(t, o, 0)
				wantLines(t, o.stdout, fmt.Sprintf("%x  -\n", sha256.Sum256(xzData())))
			},
		},
		{
			name:  "bash-pipeline",
			needs: []string{"bash", "seq", "awk", "sort", "uniq", "tr", "wc"},
			argv:  []string{"bash", filepath.Join(sources, "pipeline.sh")},
			known: wantOutput(pipelineAnswer(100000, 97), "to standard error\n"),
		},
		rustProgram(),
	}
	ps = append(ps, rustJemallocPrograms()...)
	// The same C program with a thousand threads of each stack size.
	for _, stack := range []int{16 << 10, 32 << 10, 64 << 10} {
		ps = append(ps, threadsProgram(stack))
	}
	return ps
}

func wantCode(t *testing.T, o outcome, code int) {
	t.Helper()
	if o.code != code {
		t.Errorf("exit status %d, want %d", o.code, code)
	}
}

// wantOutput is a known answer: exit status 0 and exactly this output.
func wantOutput(stdout, stderr string) func(*testing.T, outcome) {
	return func(t *testing.T, o outcome) {
		t.Helper()
		wantCode(t, o, 0)
		if o.stdout != stdout {
			t.Errorf("standard output:\n%s\nwant:\n%s", o.stdout, stdout)
		}
		if o.stderr != stderr {
			t.Errorf("standard error:\n%s\nwant:\n%s", o.stderr, stderr)
		}
	}
}

// wantLines requires each text in out.
func wantLines(t *testing.T, out string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if !strings.Contains(out, s) {
			t.Errorf("%q is not in the output:\n%s", s, tail(out, 30))
		}
	}
}

// mustRun runs a command bare to its end and returns its standard output.
func mustRun(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(msg, 30))
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func digest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
