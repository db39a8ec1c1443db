package export

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// TextOptions control Text.
type TextOptions struct {
	Top int // stacks to show; 0 means 20, negative means all
}

// Text writes a human-readable report of p: a header (view, command, rate,
// processes with their exit and dropped records, totals), a note when the
// numbers are known to be skewed, then the top stacks, leaf frame first.
// Dropped records are always shown, zero included, because a report that
// omits them cannot be told apart from one that lost nothing.
func Text(w io.Writer, c *capture.Capture, p *heap.Profile, opt TextOptions) error {
	bw := bufio.NewWriter(w)
	writeTextHeader(bw, c, p)
	// The leak suspects of a whole tree leave out its helpers (a shim's
	// shells), named in one line instead; --pid shows one.
	samples, helperLine := p.Samples, ""
	if p.View == "leaks" && p.Streams == nil && len(c.Processes) > 1 {
		if helpers := helpersBy(c, commandPID(c), allocatedBy(c)); len(helpers) > 0 {
			samples, helperLine = withoutStreams(p, helpers).Samples, HelperLine(c, helpers, p)
		}
	}
	top := opt.Top
	if top == 0 {
		top = 20
	}
	if top < 0 || top > len(samples) {
		top = len(samples)
	}
	fmt.Fprintln(bw)
	if len(samples) == 0 {
		fmt.Fprintln(bw, "no samples")
	} else {
		fmt.Fprintf(bw, "top %d of %d stacks by estimated bytes:\n", top, len(samples))
	}
	if helperLine != "" {
		fmt.Fprintln(bw, helperLine)
	}
	writeResidency(bw, c, p)
	for i, s := range samples[:top] {
		share := 0.0
		if p.TotalBytes > 0 {
			share = 100 * s.Bytes / p.TotalBytes
		}
		fmt.Fprintf(bw, "\n#%d  %s%s (%.0f bytes)  %.0f objects  %.1f%%  %s  %d samples%s\n",
			i+1, size.Human(s.Bytes), plusMinus(p.Rate, s.Var), s.Bytes, s.Objects, share, ProcessLabel(c, s.Stream), s.Count, viaFunc(s.Func))
		for _, f := range StackFrames(c, s.StackID) {
			fmt.Fprintf(bw, "      %s\n", f)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing text report: %w", err)
	}
	return nil
}

// residencyShown bounds the large blocks listed with their residency.
const residencyShown = 10

// writeResidency lists the large blocks live at the view's moment with how
// much of them was resident: a mapping or an np.empty buffer reserves its
// size but takes only the pages the program touched.
func writeResidency(w io.Writer, c *capture.Capture, p *heap.Profile) {
	at := p.At
	switch p.View {
	case "leaks":
		at = heap.AtExit
	case "live", "peak", "resident":
	default:
		return
	}
	bs := heap.Residency(c, heap.Options{Streams: p.Streams}, at)
	if len(bs) == 0 {
		return
	}
	fmt.Fprintf(w, "large blocks then, resident of reserved (as the agent last read them: once a second, at RSS's new highs, and at exit()):\n")
	start := heap.Start(c)
	// The blocks of one site, process and function are one row: a loop's
	// 64 blocks of 1 MiB are one line, not 64.
	type row struct {
		b                  heap.BlockResidency // the first, for its labels
		resident, reserved uint64
		n                  int
		stale              int64 // the oldest stale reading, 0 if none
	}
	var rows []*row
	byKey := map[string]*row{}
	for _, b := range bs {
		user, leaf := UserFrame(c, b.Alloc.StackID)
		if leaf != "" {
			user = leaf + " ← " + user
		}
		k := fmt.Sprint(b.Alloc.Stream, user, b.Alloc.Func)
		r := byKey[k]
		if r == nil {
			r = &row{b: b}
			byKey[k] = r
			rows = append(rows, r)
		}
		r.resident += b.Resident
		r.reserved += b.Reserved
		r.n++
		if b.Stale && (r.stale == 0 || b.ReadAt < r.stale) {
			r.stale = b.ReadAt
		}
	}
	for _, r := range rows[:min(len(rows), residencyShown)] {
		b := r.b
		user, leaf := UserFrame(c, b.Alloc.StackID)
		if leaf != "" {
			user = leaf + " ← " + user
		}
		// A stale reading is what the block held then: said so, never as
		// the moment's figure.
		when := ""
		if r.stale != 0 {
			when = fmt.Sprintf(", not read since %.3f s (%.3f s before)", float64(r.stale-start)/1e9, float64(b.Moment-r.stale)/1e9)
		}
		blocks := ""
		if r.n > 1 {
			blocks = fmt.Sprintf(" in %d blocks", r.n)
		}
		fmt.Fprintf(w, "  %10s of %10s%s (%3.0f%%%s)  %s by %s  %s\n", size.Human(float64(r.resident)), size.Human(float64(r.reserved)), blocks,
			100*float64(r.resident)/float64(max(r.reserved, 1)), when, ProcessLabel(c, b.Alloc.Stream), capture.FuncNames[b.Alloc.Func], user)
	}
	fmt.Fprintln(w)
}

func writeTextHeader(w io.Writer, c *capture.Capture, p *heap.Profile) {
	fmt.Fprintf(w, "view:      %s\n", p.View)
	cmd := strings.Join(c.Meta.Command, " ")
	if cmd == "" {
		cmd = "unknown"
	}
	fmt.Fprintf(w, "command:   %s\n", cmd)
	if c.Meta.AttachedPID != 0 {
		fmt.Fprintf(w, "attached:  %s\n", AttachWindow(c))
	}
	switch {
	case p.Rate == 0: // every capture's Meta has a rate of at least 1
		fmt.Fprintf(w, "rate:      unknown (the capture lost its first record)\n")
	case p.Rate == 1:
		fmt.Fprintf(w, "rate:      1 B (every allocation sampled: values are exact)\n")
	default:
		fmt.Fprintf(w, "rate:      %s (mean bytes between samples)\n", size.FormatSize(p.Rate))
		fmt.Fprintf(w, "estimates: %s\n", estimatesMean)
	}
	if p.View == "live" || p.View == "peak" || p.View == "resident" {
		fmt.Fprintf(w, "at:        %.3f s since the start; estimated heap then %s\n", float64(p.At-p.Start)/1e9, size.Human(p.HeapAt))
	}
	if p.View == "resident" {
		fmt.Fprintf(w, "resident:  the live set at the highest RSS reading, each large block counted at its resident bytes (as last read), not its size\n")
	}
	var procs []*capture.Process
	for _, pr := range c.Processes {
		if p.Covers(pr.Stream) {
			procs = append(procs, pr)
		}
	}
	fmt.Fprintf(w, "processes: %d\n", len(procs))
	sampled := sampledStreams(c)
	marks := heap.HighWaters(c)
	quiet := map[string]int{} // command -> processes with no samples
	var names []string
	for _, pr := range procs {
		if !sampled[pr.Stream] {
			name := processName(pr)
			if quiet[name] == 0 {
				names = append(names, name)
			}
			quiet[name]++
			continue
		}
		fmt.Fprintf(w, "  %s stream %d, %s%s; %s\n", ProcessLabel(c, pr.Stream), pr.Stream,
			exitStatus(c.Ends[pr.Stream]), highWaterOf(marks[pr.Stream]), dropped(p, pr.Stream))
	}
	if len(names) > 0 {
		n := 0
		for i, name := range names {
			n += quiet[name]
			names[i] = fmt.Sprintf("%s ×%d", name, quiet[name])
		}
		fmt.Fprintf(w, "  %d more with no samples: %s\n", n, strings.Join(names, ", "))
	}
	fmt.Fprintf(w, "total:     %s%s (%.0f bytes), %.0f objects, %d samples\n",
		size.Human(p.TotalBytes), plusMinus(p.Rate, p.TotalVar), p.TotalBytes, p.TotalObjects, p.RawSamples())
	for _, n := range append(captureNotes(c, p), skewNotes(p)...) {
		fmt.Fprintf(w, "note:      %s\n", n)
	}
	if n := poolNote(c, p); n != "" {
		fmt.Fprintf(w, "pools:     %s\n", n)
	}
}

// viaFunc says which hooked function a row's allocations went through:
// "  by calloc", "" for plain malloc (most rows) and mixed rows.
func viaFunc(f uint8) string {
	if name := capture.FuncNames[f]; name != "" && f != capture.FuncMalloc {
		return "  by " + name
	}
	return ""
}

// estimatesMean says once what an estimate and its ± are.
const estimatesMean = "each sampled allocation of s bytes stands for 1/(1-(1-1/rate)^s) allocations; " +
	"± is a 95 % interval computed from the samples"

// plusMinus returns " ± X", the 95 % interval of an estimate of bytes with
// variance v, or "" at rate 1, where values are exact.
func plusMinus(rate uint64, v float64) string {
	if rate <= 1 {
		return ""
	}
	return " ± " + size.Human(heap.CI95(v))
}

// sampledStreams returns the streams with at least one sampled allocation.
func sampledStreams(c *capture.Capture) map[uint32]bool {
	m := map[uint32]bool{}
	for i := range c.Allocs {
		// Runs of one stream are the rule: a map write per run, not per allocation.
		if s := c.Allocs[i].Stream; i == 0 || s != c.Allocs[i-1].Stream {
			m[s] = true
		}
	}
	return m
}

func exitStatus(e *capture.End) string {
	switch {
	case e == nil:
		return "no end record (capture cut short)"
	case e.Exec:
		return "replaced by exec"
	case e.Detached:
		return "detached (the process runs on)"
	case !e.Known:
		// Not heaplens's child and no exit() mark: _exit, a signal, SIGKILL or the OOM killer.
		return "ended without exit() (_exit or a signal); status unknown"
	case e.Signaled:
		return fmt.Sprintf("killed by signal %d", e.Signal)
	}
	return fmt.Sprintf("exited %d", e.ExitCode)
}

// highWaterOf is "; RSS high-water mark X" for a process whose mark is
// known (exact, the kernel's: heap.HighWaters), "" otherwise.
func highWaterOf(b uint64) string {
	if b == 0 {
		return ""
	}
	return "; RSS high-water mark " + size.Human(float64(b))
}

func dropped(p *heap.Profile, stream uint32) string {
	d, ok := p.Drops[stream]
	switch {
	case !ok:
		return "dropped: unknown"
	case d.Total() == 0:
		return "dropped: 0"
	}
	return fmt.Sprintf("dropped: %d alloc records, %d free records, %d lost ring bytes",
		d.DroppedAllocs, d.DroppedFrees, d.LostBytes)
}

// captureNotes returns what the agent noted while collecting and why
// Python frames are missing, for the covered processes: the same notes the
// run's summary printed.
func captureNotes(c *capture.Capture, p *heap.Profile) []string {
	var out []string
	for _, n := range c.Notes {
		if n.Stream == 0 || p.Covers(n.Stream) {
			out = append(out, n.Text)
		}
	}
	if c.Shortened > 0 {
		out = append(out, fmt.Sprintf("%d names longer than %d KiB were cut short", c.Shortened, capture.MaxName>>10))
	}
	for _, p := range c.Problems {
		out = append(out, "damaged capture: "+p+"; shown as placeholders")
	}
	for _, pr := range c.Processes {
		if pr.PythonNote != "" && p.Covers(pr.Stream) {
			out = append(out, fmt.Sprintf("pid %d: %s", pr.PID, pr.PythonNote))
		}
	}
	out = append(out, AllocatorNotes(c, p.Covers)...)
	return out
}

// skewNotes says what each kind of lost record does to this view, and in
// which direction, one note per kind.
//
// A dropped allocation record loses a sample: every view is low by it.
// A dropped free record leaves a freed block live: leaks, live and peak
// are high by it, temporary is low (the block never looks short-lived),
// allocs is unaffected. Lost ring bytes are records whose kind is unknown.
// An allocation at a live address means the free before it was lost: the
// older block counted as live until then. A free that matches no sample
// is a consequence of a dropped (or pre-profiling) allocation: ignored.
func skewNotes(p *heap.Profile) []string {
	var sum heap.DropStats
	for _, d := range p.Drops {
		sum.DroppedAllocs += d.DroppedAllocs
		sum.DroppedFrees += d.DroppedFrees
		sum.LostBytes += d.LostBytes
	}
	freedHigh := p.View == "leaks" || p.View == "live" || p.View == "peak" || p.View == "resident"
	var why []string
	if sum.DroppedAllocs > 0 {
		why = append(why, fmt.Sprintf("%d allocation records dropped: estimates are low", sum.DroppedAllocs))
	}
	if sum.DroppedFrees > 0 {
		switch {
		case freedHigh:
			why = append(why, fmt.Sprintf("%d free records dropped: freed blocks count as live, %s may be high", sum.DroppedFrees, p.View))
		case p.View == "temporary":
			why = append(why, fmt.Sprintf("%d free records dropped: temporary may be low", sum.DroppedFrees))
		}
	}
	if sum.LostBytes > 0 {
		why = append(why, fmt.Sprintf("%d ring bytes lost mid-record: estimates may be low, or high where a free was lost", sum.LostBytes))
	}
	if p.LostFrees > 0 && freedHigh {
		why = append(why, fmt.Sprintf("%d allocations reused a live address: a lost free kept the older block live until then", p.LostFrees))
	}
	if p.UnmatchedFrees > 0 {
		why = append(why, fmt.Sprintf("%d frees matched no sampled allocation (dropped, or made before profiling): ignored", p.UnmatchedFrees))
	}
	return why
}
