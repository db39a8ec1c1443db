package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeExample runs the README's Python quick start, `heaplens run --
// python3 app.py` on examples/app.py, and checks what the README says of
// it: the run succeeds, its summary names render's page line as the top
// leak suspect, and that line's leak is the known 1000 pages of 64 KiB
// within the sampling tolerance.
func TestReadmeExample(t *testing.T) {
	const (
		requests = 1000
		// A page is a bytes object of 64 KiB: one malloc of the object's
		// 33-byte header (with the trailing NUL) and its 65536 bytes.
		pageBytes = 64<<10 + 33
		rate      = 512 << 10
	)
	app := filepath.Join(root, "examples", "app.py")
	src, err := os.ReadFile(app)
	if err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, "bytes(PAGE - 1)") {
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatal("examples/app.py: no page line (bytes(PAGE - 1))")
	}

	dir := t.TempDir()
	capPath, res := profile(t, dir, nil, "/usr/bin/python3", app)
	if res.code != 0 || !strings.Contains(res.stdout, "handled 1000 requests") {
		t.Fatalf("heaplens run -- python3 app.py: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	if first := firstSuspect(res.stderr); !strings.Contains(first, "render (") || !strings.HasSuffix(first, fmt.Sprintf("app.py:%d)", line)) {
		t.Errorf("the first leak suspect is %q, want render at app.py:%d\nsummary:\n%s", first, line, res.stderr)
	}

	leaks := report(t, capPath, "leaks")
	checkSite(t, "app.py's page line, leaks", leaks.atLine("app.py", line), map[uint64]int{pageBytes: requests}, rate, 0, leaks.stacksAt("app.py", line))
}

// firstSuspect is the line after "top leak suspects" in a run's summary.
func firstSuspect(summary string) string {
	lines := strings.Split(summary, "\n")
	for i, l := range lines[:max(len(lines)-1, 0)] {
		if strings.Contains(l, "top leak suspects") {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}
