package export

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// SummaryOptions say what the summary of `heaplens run` reports on.
type SummaryOptions struct {
	Status  string // how the command ended, in words
	Capture string // where the capture is
	Top     int    // leak suspects and sites at peak shown; 0 means 5
}

// peakAt says when a peak was, in seconds since the capture's start: "at
// 1.250 s". A peak of nothing has no moment (its time is zero, before the
// start): "(nothing sampled)".
func peakAt(start int64, p heap.Point) string {
	if p.Bytes <= 0 {
		return "(nothing sampled)"
	}
	return fmt.Sprintf("at %.3f s", float64(p.T-start)/1e9)
}

// Summary writes the few lines `heaplens run` prints when the command ends
// (sum: heap.Summarize, or Replay.Summary): the peak (estimated heap and
// RSS) with its top sites, totals, the top leak suspects, sites at their
// innermost frame in the program's own code, drops, and how to look
// further. It writes no colour or terminal escapes,
// so it reads the same on a terminal and in a log.
func Summary(w io.Writer, c *capture.Capture, sum *heap.Summary, opt SummaryOptions) error {
	allocs, leaks := sum.Allocs, sum.Leaks
	helpers := Helpers(c, allocs)
	users := newUserFrames(c)
	top := opt.Top
	if top == 0 {
		top = 5
	}
	var b strings.Builder
	fmt.Fprintf(&b, "heaplens: %s %s\n", shortCommand(c.Meta.Command), opt.Status)
	if c.Meta.AttachedPID != 0 {
		fmt.Fprintf(&b, "  attached:  %s\n", AttachWindow(c))
	}
	if c.Meta.Rate == 0 { // every capture's Meta has a rate of at least 1
		fmt.Fprintf(&b, "  the capture lost its first record: nothing below can be trusted\n")
	} else {
		folded := ""
		if len(helpers) > 0 {
			folded = fmt.Sprintf(" (%d of them short-lived helpers, folded below)", len(helpers))
		}
		fmt.Fprintf(&b, "  sampled every %s on average; %d process image(s)%s, %d samples\n",
			size.FormatSize(c.Meta.Rate), len(c.Processes), folded, allocs.RawSamples())
	}
	pythonNotes(&b, c)
	if c.Meta.Rate > 1 {
		fmt.Fprintf(&b, "  estimates:  %s\n", estimatesMean)
	}
	fmt.Fprintf(&b, "  peak        %10s%s estimated heap %s", size.Human(sum.HeapPeak.Bytes), plusMinus(c.Meta.Rate, sum.Peak.TotalVar), peakAt(sum.Start, sum.HeapPeak))
	b.WriteString("\n")
	for _, l := range RSSPeakLines(c, sum.HighWater, sum.RSSPeak, sum.Start, "  RSS peak", 14) {
		b.WriteString(l + "\n")
	}
	for _, l := range GapLines(sum.Gap, sum.Start, "  ") {
		b.WriteString(l + "\n")
	}
	if pk := withoutStreams(sum.Peak, helpers); len(pk.Samples) > 0 {
		fmt.Fprintf(&b, "  top sites at peak:\n")
		for i, s := range bySite(users, pk, top) {
			fmt.Fprintf(&b, "    %d. %10s%s  %s\n", i+1, size.Human(s.bytes), plusMinus(c.Meta.Rate, s.v), s.label)
		}
	}
	residentBlocks(&b, c, "large blocks at peak, by resident bytes", sum.PeakBlocks, helpers, sum.Start)
	fmt.Fprintf(&b, "  allocated   %10s%s in %s objects (estimated)\n", size.Human(allocs.TotalBytes), plusMinus(c.Meta.Rate, allocs.TotalVar), count(allocs.TotalObjects))
	end, ended := "live at end", "live when the process ended"
	if c.Meta.AttachedPID != 0 {
		end, ended = "live at detach", "allocated while attached, live at the detach"
	}
	fmt.Fprintf(&b, "  %-11s %10s%s in %s objects (estimated)\n", end, size.Human(leaks.TotalBytes), plusMinus(c.Meta.Rate, leaks.TotalVar), count(leaks.TotalObjects))
	if own := withoutStreams(leaks, helpers); len(own.Samples) > 0 {
		fmt.Fprintf(&b, "  top leak suspects (%s):\n", ended)
		for i, s := range bySite(users, own, top) {
			fmt.Fprintf(&b, "    %d. %10s%s  %s\n", i+1, size.Human(s.bytes), plusMinus(c.Meta.Rate, s.v), s.label)
		}
	}
	residentBlocks(&b, c, "large blocks live at the end, by resident bytes", sum.EndBlocks, helpers, sum.Start)
	if l := HelperLine(c, helpers, leaks); l != "" {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	var da, df, lost uint64
	for _, d := range leaks.Drops {
		da, df, lost = da+d.DroppedAllocs, df+d.DroppedFrees, lost+d.LostBytes
	}
	fmt.Fprintf(&b, "  dropped: %d allocation and %d free records", da, df)
	if lost > 0 {
		fmt.Fprintf(&b, ", %d ring bytes lost", lost)
	}
	if df > 0 || lost > 0 {
		b.WriteString(" (lost frees make leaks look bigger than they are; try a larger --ring-size)")
	}
	b.WriteString("\n")
	lookFurther(&b, opt.Capture)
	_, err := io.WriteString(w, b.String())
	return err
}

// pythonNotes says, near the top where it cannot be missed, why processes
// ran without Python frames or object sampling: every figure below lacks
// them. Processes with the same note (a pool of workers) share one line.
func pythonNotes(b *strings.Builder, c *capture.Capture) {
	var notes []string
	pids := map[string][]string{}
	for _, p := range c.Processes {
		if p.PythonNote == "" {
			continue
		}
		if pids[p.PythonNote] == nil {
			notes = append(notes, p.PythonNote)
		}
		pids[p.PythonNote] = append(pids[p.PythonNote], fmt.Sprint(p.PID))
	}
	for _, n := range notes {
		ps := pids[n]
		switch {
		case len(ps) == 1:
			fmt.Fprintf(b, "  !!! pid %s: %s\n", ps[0], n)
		case len(ps) <= 4:
			fmt.Fprintf(b, "  !!! pids %s: %s\n", strings.Join(ps, ", "), n)
		default:
			fmt.Fprintf(b, "  !!! pids %s and %d more: %s\n", strings.Join(ps[:3], ", "), len(ps)-3, n)
		}
	}
}

// lookFurther says where the capture is and how to open it.
func lookFurther(b *strings.Builder, capture string) {
	fmt.Fprintf(b, "  capture: %s\n", capture)
	fmt.Fprintf(b, "  look further: heaplens report %s --view peak   (or leaks, live --at 1s, allocs, temporary, timeline, resident)\n", capture)
	fmt.Fprintf(b, "                heaplens report %s --format html -o report.html   (or pprof, speedscope, json, folded)\n", capture)
	fmt.Fprintf(b, "                heaplens serve %s\n", capture)
}

// SummaryTooLarge is the summary of a run whose capture is too large to
// summarise with the memory left: how the command ended, why there are no
// figures, and how to look further.
func SummaryTooLarge(w io.Writer, command []string, status, capture string, records, need, free uint64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "heaplens: %s %s\n", shortCommand(command), status)
	fmt.Fprintf(&b, "  %s sampled allocations and frees: summarising them would take about %s of memory, more than half of the %s free now; no figures here\n",
		count(float64(records)), size.Human(float64(need)), size.Human(float64(free)))
	lookFurther(&b, capture)
	_, err := io.WriteString(w, b.String())
	return err
}

// shortCommand is a command line cut to 60 characters.
func shortCommand(command []string) string {
	cmd := strings.Join(command, " ")
	if len(cmd) > 60 {
		cmd = cmd[:57] + "..."
	}
	return cmd
}

func count(n float64) string { return fmt.Sprintf("%.0f", n) }

type site struct {
	label    string
	bytes, v float64 // estimate and its variance
}

// bySite merges stacks by their innermost user frame, biggest first; the
// label names the leaf that allocated the most beside it, and how many
// other leaves there were.
func bySite(u *userFrames, p *heap.Profile, top int) []site {
	type acc struct {
		site
		leaves map[string]float64
	}
	sum := map[string]*acc{}
	for _, s := range p.Samples {
		user, leaf := u.of(s.StackID)
		a := sum[user]
		if a == nil {
			a = &acc{site: site{label: user}, leaves: map[string]float64{}}
			sum[user] = a
		}
		a.bytes += s.Bytes
		a.v += s.Var // different stacks' samples are independent
		if leaf != "" {
			a.leaves[leaf] += s.Bytes
		}
	}
	out := make([]site, 0, len(sum))
	for _, a := range sum {
		s := a.site
		if len(a.leaves) > 0 {
			var most string
			for l, b := range a.leaves {
				if most == "" || b > a.leaves[most] || (b == a.leaves[most] && l < most) {
					most = l
				}
			}
			s.label += " via " + most
			if n := len(a.leaves) - 1; n > 0 {
				s.label += fmt.Sprintf(" and %d other", n)
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].bytes != out[j].bytes {
			return out[i].bytes > out[j].bytes
		}
		return out[i].label < out[j].label
	})
	if len(out) > top {
		out = out[:top]
	}
	return out
}

// UserFrame returns the label of a stack's innermost frame in the user's
// own code: not in a system library (libc, libstdc++, the loader…), not
// the Python interpreter or an extension module it loaded from its own
// directories, not the standard library, not an installed package (site-
// or dist-packages), not the import machinery, and not the frame that
// joins a pool worker's stack to the thread that asked for the work. leaf is the stack's leaf
// when that is another frame ("" otherwise), named by its module alone
// when its function is unknown: a cache that json.loads fills is the
// cache's code, via _json. When every frame is outside the user's code,
// user is the leaf and leaf is "".
func UserFrame(c *capture.Capture, stackID uint64) (user, leaf string) {
	return newUserFrames(c).of(stackID)
}

// userFrames is UserFrame for many stacks of one capture: it decides once
// per location whether it is the user's, and names each stack once (an
// exact run's summary asks for ~1 M stacks, sharing most of their frames).
type userFrames struct {
	c      *capture.Capture
	interp map[string]bool
	users  map[uint64]bool      // by location ID
	stacks map[uint64][2]string // by stack ID: user, leaf
}

func newUserFrames(c *capture.Capture) *userFrames {
	return &userFrames{c: c, interp: interpreterFiles(c), users: map[uint64]bool{}, stacks: map[uint64][2]string{}}
}

// of is UserFrame(u.c, stackID).
func (u *userFrames) of(stackID uint64) (user, leaf string) {
	if s, ok := u.stacks[stackID]; ok {
		return s[0], s[1]
	}
	user, leaf = u.name(stackID)
	u.stacks[stackID] = [2]string{user, leaf}
	return user, leaf
}

// name is UserFrame, through the location cache.
func (u *userFrames) name(stackID uint64) (user, leaf string) {
	c := u.c
	frames := stackFrames(c, stackID, 1) // the leaf's label is all it compares
	st := c.Stacks[stackID]
	if st == nil || len(st.Locations) == 0 {
		return frames[0], ""
	}
	for _, id := range st.Locations {
		if !u.isUser(id) {
			continue
		}
		loc := c.Locations[id]
		m := c.Mappings[loc.MappingID]
		if len(loc.Lines) == 0 {
			user = FrameLabel(loc, nil, m)
		} else {
			user = FrameLabel(loc, &loc.Lines[0], m)
		}
		if user != frames[0] {
			leaf = frames[0]
			if first := c.Locations[st.Locations[0]]; first != nil && (len(first.Lines) == 0 || first.Lines[0].Function == "") {
				if fm := c.Mappings[first.MappingID]; fm != nil && fm.File != "" {
					leaf = filepath.Base(fm.File) // an address says nothing to a reader
				}
			}
		}
		return user, leaf
	}
	return frames[0], ""
}

// isUser reports whether a location is in the user's code (see UserFrame).
func (u *userFrames) isUser(id uint64) bool {
	is, ok := u.users[id]
	if ok {
		return is
	}
	loc := u.c.Locations[id]
	switch {
	case loc == nil:
	case loc.Kind == capture.KindPool: // pool work: the code that asked for it is further out
	case loc.Kind == capture.KindPython:
		is = len(loc.Lines) > 0 && !notUsers(loc.Lines[0].File)
	default:
		m := u.c.Mappings[loc.MappingID]
		is = m == nil || !(systemFile(m.File) || u.interp[m.File] || notUsers(m.File))
	}
	u.users[id] = is
	return is
}

// interpreterFiles returns the executables of the capture's Python
// processes: their native frames are the interpreter's.
func interpreterFiles(c *capture.Capture) map[string]bool {
	m := map[string]bool{}
	for _, p := range c.Processes {
		if p.Python != "" && p.Exe != "" {
			m[p.Exe] = true
		}
	}
	return m
}

func systemFile(path string) bool {
	for _, p := range []string{"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// notUsers reports whether a source file or module belongs to Python's
// installation (the standard library and its extension modules, libpython,
// the import machinery's frozen modules) or to an installed package.
func notUsers(path string) bool {
	if strings.HasPrefix(path, "<frozen ") || strings.Contains(path, "/site-packages/") ||
		strings.Contains(path, "/dist-packages/") || strings.Contains(filepath.Base(path), "libpython") {
		return true
	}
	return stdlib.MatchString(path)
}

// stdlib matches the standard library's files, PREFIX/lib/python3.X/….
var stdlib = regexp.MustCompile(`/lib/python\d+(\.\d+)?t?/`)

// AttachWindow describes the window of a heaplens attach capture, and what
// the views mean in it.
func AttachWindow(c *capture.Capture) string {
	var from, until int64
	var at time.Time
	for _, p := range c.Processes {
		if p.PID != c.Meta.AttachedPID || (from != 0 && p.StartMonoNano >= from) {
			continue
		}
		from, at = p.StartMonoNano, time.Unix(0, p.StartUnixNano)
		if e := c.Ends[p.Stream]; e != nil {
			until = e.TimeNano
		}
	}
	if from == 0 {
		return fmt.Sprintf("to pid %d, which made no allocation while attached", c.Meta.AttachedPID)
	}
	span := "until the capture was cut short"
	if until > from {
		span = fmt.Sprintf("for %.1f s", float64(until-from)/1e9)
	}
	ns := ""
	if c.Meta.AttachedHostPID != 0 {
		ns = fmt.Sprintf(" of its container's PID namespace (pid %d in heaplens's)", c.Meta.AttachedHostPID)
	}
	return fmt.Sprintf("to pid %d%s from %s %s: only allocations made meanwhile are seen; "+
		"peak is theirs, leaks are those still live at the detach", c.Meta.AttachedPID, ns, at.Format("2006-01-02 15:04:05"), span)
}
