package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/launch"
)

func printSummary(w io.Writer, res *launch.Result) error {
	c, err := capture.Load(res.Capture)
	var corrupt *capture.CorruptError
	if err != nil && !errors.As(err, &corrupt) {
		return err
	}
	peak, timeline := heap.PeakAndTimeline(c, heap.Options{}) // one replay for both
	if err := export.Summary(w, c, heap.Allocs(c, heap.Options{}), heap.Leaks(c, heap.Options{}),
		export.SummaryOptions{Status: res.Status, Capture: res.Capture, Peak: peak, Timeline: timeline}); err != nil {
		return err
	}
	for _, p := range c.Processes {
		if p.PythonNote != "" {
			fmt.Fprintf(w, "  pid %d: %s\n", p.PID, p.PythonNote)
		}
	}
	return err // a damaged capture is still summarised, then reported
}
