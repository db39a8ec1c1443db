// Package attachcost measures what heaplens attach costs the process it
// attaches to (hlbench attach), with 100 loaded objects besides the usual
// ones: how long the thread that runs dlopen stays stopped (heaplens says),
// how late the process's own 1 ms timer loop wakes up over a run with two
// attach sessions (the first loads the library, the second finds it) and
// their detaches, against bare runs interleaved with them, and how long
// heaplens takes from its start to the session's start. It writes
// attach.md and attach.json.
package attachcost

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

const objects = 100

// Run runs the benchmark.
func Run(c harness.Common) error {
	if err := c.Resolve(7); err != nil {
		return err
	}
	b := &bench{c: c, heaplens: filepath.Join(c.Root, "bin", "heaplens")}
	if err := c.Built(b.heaplens); err != nil {
		return err
	}
	tmp, done, err := c.TempDir("hlbench-attach", logf)
	if err != nil {
		return err
	}
	defer done()
	b.tmp = tmp
	if err := b.build(); err != nil {
		return err
	}
	rep := Report{Stamp: c.Stamp(), Objects: objects}
	for i := 0; i < c.Runs; i++ {
		for _, attached := range harness.Rotation(2, i) {
			m, err := b.once(attached == 1)
			if err != nil {
				return err
			}
			if attached == 1 {
				rep.Attached = append(rep.Attached, m)
			} else {
				rep.Bare = append(rep.Bare, m)
			}
		}
		logf("round %d of %d", i+1, c.Runs)
	}
	rep.Finish(&b.warnings)
	return harness.Save(c.Out, "attach", formatMarkdown(rep), rep)
}

var logf = harness.Logf("attach")

type bench struct {
	c        harness.Common
	heaplens string
	tmp      string
	target   string
	libs     []string
	warnings harness.Warnings
}

// Measure is one run of the target.
type Measure struct {
	MaxLateMS float64 `json:"max_late_ms"` // the target's worst 1 ms sleep, late by
	Late2     int     `json:"late_over_2ms"`
	// Attached runs only.
	PausedMS  float64 `json:"paused_ms,omitempty"`  // the dlopen thread's stop, as heaplens reports it
	StartMS   float64 `json:"start_ms,omitempty"`   // heaplens attach's start to the session's start (first session)
	ReStartMS float64 `json:"restart_ms,omitempty"` // the same for the second session (library loaded already)
	Routed    int     `json:"routed,omitempty"`     // GOT entries routed
}

// Report is attach.json.
type Report struct {
	harness.Stamp
	Objects  int       `json:"objects"`
	Bare     []Measure `json:"bare"`
	Attached []Measure `json:"attached"`
}

func (b *bench) build() error {
	src := filepath.Join(b.tmp, "obj.c")
	if err := os.WriteFile(src, []byte("#include <stdlib.h>\nvoid *volatile obj_sink;\nvoid obj_work(void) { free(obj_sink); obj_sink = malloc(64); }\n"), 0o644); err != nil {
		return err
	}
	so := filepath.Join(b.tmp, "obj.so")
	if out, err := exec.Command("gcc", "-O2", "-fPIC", "-shared", "-o", so, src).CombinedOutput(); err != nil {
		return fmt.Errorf("gcc: %v\n%s", err, out)
	}
	data, err := os.ReadFile(so)
	if err != nil {
		return err
	}
	for i := 0; i < objects; i++ {
		p := filepath.Join(b.tmp, fmt.Sprintf("libobj%03d.so", i))
		if err := os.WriteFile(p, data, 0o755); err != nil {
			return err
		}
		b.libs = append(b.libs, p)
	}
	b.target = filepath.Join(b.tmp, "many_objects")
	if out, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-o", b.target, filepath.Join(b.c.Root, "bench", "workloads", "many_objects.c"), "-ldl").CombinedOutput(); err != nil {
		return fmt.Errorf("gcc: %v\n%s", err, out)
	}
	return nil
}

var (
	pausedRe = regexp.MustCompile(`one thread paused ([0-9.]+) ms; (\d+) GOT entries routed`)
	lateRe   = regexp.MustCompile(`max_late_ms=([0-9.]+) late2=(\d+)`)
)

// once runs the target for 4 s; attached, with a 1 s session from 0.5 s and another from 2 s.
func (b *bench) once(attached bool) (Measure, error) {
	var m Measure
	cmd := exec.Command(b.target, append([]string{"4"}, b.libs...)...)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return m, err
	}
	if attached {
		time.Sleep(500 * time.Millisecond)
		first, err := b.session(cmd.Process.Pid, &m)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return m, err
		}
		m.StartMS = first
		time.Sleep(200 * time.Millisecond)
		if m.ReStartMS, err = b.session(cmd.Process.Pid, nil); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return m, err
		}
	}
	if err := cmd.Wait(); err != nil {
		return m, fmt.Errorf("many_objects: %v", err)
	}
	g := lateRe.FindStringSubmatch(out.String())
	if g == nil {
		return m, fmt.Errorf("many_objects printed %q", out.String())
	}
	m.MaxLateMS, _ = strconv.ParseFloat(g[1], 64)
	m.Late2, _ = strconv.Atoi(g[2])
	return m, nil
}

// session runs one 1 s attach session and returns the milliseconds from
// heaplens's start to its "attached" line; with m, it also reads the pause.
func (b *bench) session(pid int, m *Measure) (float64, error) {
	cmd := exec.Command(b.heaplens, "attach", strconv.Itoa(pid), "--duration", "1s", "-q", "-o", filepath.Join(b.tmp, "s.hlc"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, err
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var startMS float64
	var all strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		if strings.Contains(line, "attached to pid") && startMS == 0 {
			startMS = float64(time.Since(began).Microseconds()) / 1000
			if g := pausedRe.FindStringSubmatch(line); g != nil && m != nil {
				m.PausedMS, _ = strconv.ParseFloat(g[1], 64)
				m.Routed, _ = strconv.Atoi(g[2])
			}
		}
	}
	io.Copy(io.Discard, stderr)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("heaplens attach: %v\n%s", err, all.String())
	}
	b.warnings.Note("attach", all.String())
	if startMS == 0 {
		return 0, fmt.Errorf("heaplens attach never said it attached:\n%s", all.String())
	}
	return startMS, nil
}

func formatMarkdown(r Report) string {
	var sb strings.Builder
	sb.WriteString(r.Header("heaplens attach: the pause", fmt.Sprintf("%d extra loaded objects", r.Objects)))
	med := func(ms []Measure, f func(Measure) float64) string {
		return fmt.Sprintf("%.2f", harness.Median(harness.Field(ms, f)))
	}
	worst := func(ms []Measure, f func(Measure) float64) string {
		w := 0.0
		for _, x := range harness.Field(ms, f) {
			w = max(w, x)
		}
		return fmt.Sprintf("%.2f", w)
	}
	late := func(m Measure) float64 { return m.MaxLateMS }
	late2 := func(m Measure) float64 { return float64(m.Late2) }
	rows := [][]string{
		{"the dlopen thread stopped (heaplens's count), ms", "—", med(r.Attached, func(m Measure) float64 { return m.PausedMS }), worst(r.Attached, func(m Measure) float64 { return m.PausedMS })},
		{"the target's worst 1 ms sleep, late by, ms", med(r.Bare, late), med(r.Attached, late), worst(r.Attached, late)},
		{"the target's sleeps late by over 2 ms (of 4000)", med(r.Bare, late2), med(r.Attached, late2), worst(r.Attached, late2)},
		{"heaplens attach: start to session start, first (loads), ms", "—", med(r.Attached, func(m Measure) float64 { return m.StartMS }), worst(r.Attached, func(m Measure) float64 { return m.StartMS })},
		{"heaplens attach: start to session start, again (loaded), ms", "—", med(r.Attached, func(m Measure) float64 { return m.ReStartMS }), worst(r.Attached, func(m Measure) float64 { return m.ReStartMS })},
		{"GOT entries routed", "—", med(r.Attached, func(m Measure) float64 { return float64(m.Routed) }), ""},
	}
	sb.WriteString("\n\n")
	sb.WriteString(harness.Table([]string{"", "bare (median)", "attached (median)", "attached (worst)"}, rows))
	sb.WriteString("\nThe target runs 4 s; attached runs get a 1 s session from 0.5 s (which loads the library) and another 0.2 s after the first ends; a detach stops no thread.\n")
	if len(r.Warnings) > 0 {
		sb.WriteString("\nWarnings:\n")
		for _, w := range r.Warnings {
			sb.WriteString("- " + w + "\n")
		}
	}
	return sb.String()
}
