package export

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// Folded writes p in the folded-stacks format of flamegraph.pl and
// speedscope: one line per (stream, stack), frames root first separated by
// ';', starting with the process as "[PID COMMAND]", then a space and the
// estimated bytes rounded to an integer. Lines are in the profile's order
// (bytes descending); stacks that round to 0 bytes are left out.
func Folded(w io.Writer, c *capture.Capture, p *heap.Profile) error {
	bw := bufio.NewWriter(w)
	var sb strings.Builder
	for _, s := range p.Samples {
		n := math.Round(s.Bytes)
		if n < 1 {
			continue
		}
		sb.Reset()
		sb.WriteString(foldedSafe.Replace(ProcessLabel(c, s.Stream)))
		frames := StackFrames(c, s.StackID)
		for _, f := range slices.Backward(frames) {
			sb.WriteByte(';')
			sb.WriteString(foldedSafe.Replace(f))
		}
		fmt.Fprintf(&sb, " %.0f\n", n)
		if _, err := bw.WriteString(sb.String()); err != nil {
			return fmt.Errorf("writing folded stacks: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing folded stacks: %w", err)
	}
	return nil
}
