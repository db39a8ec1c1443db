package export

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// SummaryOptions say what the summary of `heaplens run` reports on.
type SummaryOptions struct {
	Status  string // how the command ended, in words
	Capture string // where the capture is
	Top     int    // leak suspects and sites at peak shown; 0 means 5

	// Peak is the peak view and Timeline the timeline of the capture; when
	// set, the summary states the peak (estimated and RSS) and its top
	// sites.
	Peak     *heap.Profile
	Timeline *heap.Timeline
}

// peakAt says when a peak was, in seconds since the capture's start: "at
// 1.250 s". A peak of nothing has no moment (its time is zero, before the
// start): "(nothing sampled)".
func peakAt(tl *heap.Timeline, p heap.Point) string {
	if p.Bytes <= 0 {
		return "(nothing sampled)"
	}
	return fmt.Sprintf("at %.3f s", float64(p.T-tl.Start)/1e9)
}

// Summary writes the few lines `heaplens run` prints when the command ends:
// the peak (estimated heap and RSS) with its top sites, totals, the top leak
// suspects, sites at their innermost frame in the program's own code,
// drops, and how to look further. It writes no colour or terminal escapes,
// so it reads the same on a terminal and in a log.
func Summary(w io.Writer, c *capture.Capture, allocs, leaks *heap.Profile, opt SummaryOptions) error {
	top := opt.Top
	if top == 0 {
		top = 5
	}
	var b strings.Builder
	cmd := strings.Join(c.Meta.Command, " ")
	if len(cmd) > 60 {
		cmd = cmd[:57] + "..."
	}
	fmt.Fprintf(&b, "heaplens: %s %s\n", cmd, opt.Status)
	fmt.Fprintf(&b, "  sampled every %s on average; %d process image(s), %d samples\n",
		size.FormatSize(c.Meta.Rate), len(c.Processes), allocs.RawSamples())
	if c.Meta.Rate > 1 {
		fmt.Fprintf(&b, "  estimates:  %s\n", estimatesMean)
	}
	if tl := opt.Timeline; tl != nil {
		pm := ""
		if pk := opt.Peak; pk != nil {
			pm = plusMinus(c.Meta.Rate, pk.TotalVar)
		}
		fmt.Fprintf(&b, "  peak        %10s%s estimated heap %s", size.Human(tl.Peak.Bytes), pm, peakAt(tl, tl.Peak))
		if tl.PeakRSS.Bytes > 0 {
			fmt.Fprintf(&b, "; RSS peak %s %s", size.Human(tl.PeakRSS.Bytes), peakAt(tl, tl.PeakRSS))
		}
		b.WriteString("\n")
	}
	if pk := opt.Peak; pk != nil && len(pk.Samples) > 0 {
		fmt.Fprintf(&b, "  top sites at peak:\n")
		for i, s := range bySite(c, pk, top) {
			fmt.Fprintf(&b, "    %d. %10s%s  %s\n", i+1, size.Human(s.bytes), plusMinus(c.Meta.Rate, s.v), s.label)
		}
	}
	fmt.Fprintf(&b, "  allocated   %10s%s in %s objects (estimated)\n", size.Human(allocs.TotalBytes), plusMinus(c.Meta.Rate, allocs.TotalVar), count(allocs.TotalObjects))
	fmt.Fprintf(&b, "  live at end %10s%s in %s objects (estimated)\n", size.Human(leaks.TotalBytes), plusMinus(c.Meta.Rate, leaks.TotalVar), count(leaks.TotalObjects))
	if len(leaks.Samples) > 0 {
		fmt.Fprintf(&b, "  top leak suspects (live when the process ended):\n")
		for i, s := range bySite(c, leaks, top) {
			fmt.Fprintf(&b, "    %d. %10s%s  %s\n", i+1, size.Human(s.bytes), plusMinus(c.Meta.Rate, s.v), s.label)
		}
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
	fmt.Fprintf(&b, "  capture: %s\n", opt.Capture)
	fmt.Fprintf(&b, "  look further: heaplens report %s --view peak   (or leaks, live --at 1s, allocs, temporary, timeline)\n", opt.Capture)
	fmt.Fprintf(&b, "                heaplens report %s --format html -o report.html   (or pprof, speedscope, json, folded)\n", opt.Capture)
	fmt.Fprintf(&b, "                heaplens serve %s\n", opt.Capture)
	_, err := io.WriteString(w, b.String())
	return err
}

func count(n float64) string { return fmt.Sprintf("%.0f", n) }

type site struct {
	label    string
	bytes, v float64 // estimate and its variance
}

// bySite merges stacks by their innermost user frame, biggest first.
func bySite(c *capture.Capture, p *heap.Profile, top int) []site {
	sum := map[string]*site{}
	for _, s := range p.Samples {
		l := UserFrame(c, s.StackID)
		if sum[l] == nil {
			sum[l] = &site{label: l}
		}
		sum[l].bytes += s.Bytes
		sum[l].v += s.Var // different stacks' samples are independent
	}
	out := make([]site, 0, len(sum))
	for _, s := range sum {
		out = append(out, *s)
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

// UserFrame returns the label of a stack's innermost frame outside system
// libraries (libc, libstdc++, the loader…): the code a user can change. When
// every frame is a system one, the leaf is returned.
func UserFrame(c *capture.Capture, stackID uint64) string {
	st := c.Stacks[stackID]
	if st == nil || len(st.Locations) == 0 {
		return StackFrames(c, stackID)[0]
	}
	for _, id := range st.Locations {
		loc := c.Locations[id]
		if loc == nil {
			continue
		}
		m := c.Mappings[loc.MappingID]
		if m != nil && systemFile(m.File) {
			continue
		}
		if len(loc.Lines) == 0 {
			return FrameLabel(loc, nil, m)
		}
		return FrameLabel(loc, &loc.Lines[0], m)
	}
	return StackFrames(c, stackID)[0]
}

func systemFile(path string) bool {
	for _, p := range []string{"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}
