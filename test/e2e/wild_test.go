package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/heap"
)

// Programs that retitle, sandbox or limit themselves (issue 42).

// ourFiles lists the files in dir that the library names its own: a ring
// written outside its private directory lands there.
func ourFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		for _, p := range []string{"ring.", "new.", "unprofiled.", "unwind."} {
			if strings.HasPrefix(e.Name(), p) {
				out[filepath.Join(dir, e.Name())] = true
			}
		}
	}
	return out
}

// A program that moves its environment and writes a title over the old
// block (setproctitle, as nginx and sshd do) keeps being profiled in the
// children it forks after that: the library copied its directory at start.
// It kept a pointer into the block, and each child made a 16 MiB ring in /
// and ran unprofiled. The last child execs a shell, which must still see
// the moved environment. A child whose environment keeps LD_PRELOAD but
// loses heaplens's settings runs unprofiled, and the run says why.
func TestRetitledEnvironment(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "retitle.c")
	work := filepath.Join(dir, "cwd")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	before := ourFiles(t, "/")
	capPath := filepath.Join(dir, "retitle.hlc")
	res := runIn(t, work, []string{"RETITLE_CHECK=moved"}, heaplensBin(t), "run", "-o", capPath, "--rate", "1", "--", bin)
	if res.code != 0 || res.stdout != "moved\nchildren ok 8 of 8\n" {
		t.Fatalf("exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	for _, d := range []string{"/", work} {
		for f := range ourFiles(t, d) {
			if !before[f] {
				t.Errorf("the library wrote %s, outside its private directory", f)
				if d == "/" {
					os.Remove(f)
				}
			}
		}
	}
	c := load(t, capPath)
	leaks := heap.Leaks(c, heap.Options{})
	kids := 0
	for _, p := range c.Processes {
		if got := streamSite(c, leaks, p.Stream, "", 0, "child_keep"); got > 0 {
			kids++
			if got != 10*100000 {
				t.Errorf("child %d keeps %.0f bytes at child_keep, want 1000000", p.PID, got)
			}
		}
	}
	if kids != 8 {
		t.Errorf("%d children with child_keep in the capture, want 8 (of %d streams)\n%s", kids, len(c.Processes), res.stderr)
	}

	// The settings lost on the way to an exec: a shell keeps LD_PRELOAD alone.
	res = runIn(t, work, nil, heaplensBin(t), "run", "-o", filepath.Join(dir, "lost.hlc"), "--",
		"bash", "-c", `env -i LD_PRELOAD="$LD_PRELOAD" sleep 1; echo done`)
	if res.code != 0 || res.stdout != "done\n" {
		t.Fatalf("exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}
	if !regexp.MustCompile(`pid \d+ \(\S*sleep\) ran unprofiled: its environment kept heaplens's LD_PRELOAD but lost its settings`).MatchString(res.stderr) {
		t.Errorf("the run does not say why sleep ran unprofiled:\n%s", res.stderr)
	}
}
