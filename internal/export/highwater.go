package export

import (
	"fmt"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// RSSPeakLines say how much memory the processes held resident at most:
// the kernel's high-water mark, exact, first; then the highest reading of
// the sampled series (the sum over the processes at one reading), said to
// be sampled, with its moment. The first line begins with label, padded to
// width; the second is aligned under its text.
func RSSPeakLines(c *capture.Capture, hw heap.HighWater, sampled heap.Point, start int64, label string, width int) []string {
	pad := fmt.Sprintf("%*s", width, "")
	var lines []string
	// The ring heaplens adds to the process is resident too: said, not hidden.
	ring := ""
	if hw.Ring > 0 {
		ring = fmt.Sprintf("; heaplens's ring is at most %s of it", size.Human(float64(hw.Ring)))
	}
	switch {
	case hw.Bytes == 0:
	case hw.Command:
		lines = append(lines, fmt.Sprintf("%-*s%s exact: the kernel's high-water mark of the command (ru_maxrss, /usr/bin/time's %%M)%s", width, label, size.Human(float64(hw.Bytes)), ring))
	default:
		lines = append(lines, fmt.Sprintf("%-*s%s exact: the kernel's high-water mark of %s (VmHWM), the largest of %d process image(s)%s",
			width, label, size.Human(float64(hw.Bytes)), ProcessLabel(c, hw.Stream), hw.Images, ring))
	}
	if sampled.Bytes > 0 {
		prefix := pad
		if len(lines) == 0 {
			prefix = fmt.Sprintf("%-*s", width, label)
		}
		pace := "at every poll during the first 100 ms of each process, then every 100 ms"
		if hw.Bytes == 0 { // an agent from before high-water marks read it at this pace
			pace = "about every 100 ms"
		}
		lines = append(lines, fmt.Sprintf("%ssampled: the highest reading %s %s (RSS is read %s: it misses what lasts less)",
			prefix, size.Human(sampled.Bytes), peakAt(start, sampled), pace))
	}
	return lines
}
