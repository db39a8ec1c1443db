package export

import (
	"bufio"
	"fmt"
	"io"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// TimelineText writes the timeline view as text: the peaks, then one line
// per point of the whole tree's estimated heap and of the RSS samples,
// merged in time order. Times are seconds since the capture's start. rp
// is the replay tl comes from.
func TimelineText(w io.Writer, c *capture.Capture, tl *heap.Timeline, rp *heap.Replay) error {
	bw := bufio.NewWriter(w)
	s := func(t int64) float64 { return float64(t-tl.Start) / 1e9 }
	fmt.Fprintf(bw, "view:      timeline\n")
	fmt.Fprintf(bw, "duration:  %.3f s\n", s(tl.End))
	fmt.Fprintf(bw, "peak:      %s (%.0f bytes) estimated heap %s\n", size.Human(tl.Peak.Bytes), tl.Peak.Bytes, peakAt(tl.Start, tl.Peak))
	for _, l := range RSSPeakLines(c, rp.HighWater(), tl.PeakRSS, tl.Start, "peak RSS:", 11) {
		fmt.Fprintln(bw, l)
	}
	for _, st := range tl.Streams {
		fmt.Fprintf(bw, "  %s stream %d: peak %s %s\n", ProcessLabel(c, st.Stream), st.Stream, size.Human(st.Peak.Bytes), peakAt(tl.Start, st.Peak))
	}
	for _, l := range GapLines(rp.RSSGap(), tl.Start, "") {
		fmt.Fprintln(bw, l)
	}
	fmt.Fprintf(bw, "\n%10s  %14s  %14s\n", "time (s)", "heap (est.)", "RSS")
	i, j := 0, 0
	lastRSS := "-"
	for i < len(tl.Total) || j < len(tl.TotalRSS) {
		if j < len(tl.TotalRSS) && (i >= len(tl.Total) || tl.TotalRSS[j].T < tl.Total[i].T) {
			lastRSS = size.Human(tl.TotalRSS[j].Bytes)
			j++
			continue
		}
		p := tl.Total[i]
		i++
		fmt.Fprintf(bw, "%10.3f  %14s  %14s\n", s(p.T), size.Human(p.Bytes), lastRSS)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing timeline: %w", err)
	}
	return nil
}
