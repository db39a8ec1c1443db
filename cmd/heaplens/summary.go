package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
	"github.com/heaplens/heaplens/internal/sysmem"
)

// summaryBytesPerRecord is what the summary takes for each sampled
// allocation or free it loads and replays: 61 bytes of RSS measured on
// 8 M records (--rate 1), with room to spare.
const summaryBytesPerRecord = 100

// summaryFits reports whether summarising records takes at most half of
// the memory free, so that the summary never runs the machine (or the
// container) out of memory after the command is done.
func summaryFits(records, free uint64) bool {
	return records <= free/2/summaryBytesPerRecord
}

// printSummary prints the summary of a run or an attach session from its
// capture; status says how it ended; command is what was run, for a
// capture that lost its first record; records is how many allocations and
// frees the capture holds.
func printSummary(w io.Writer, capturePath, status string, command []string, records uint64) (err error) {
	defer func() {
		// A bug in the summary must not cost the command's exit status.
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error, please report it: %v", r)
		}
	}()
	if free, ok := sysmem.Available(); ok && !summaryFits(records, free) {
		return export.SummaryTooLarge(w, command, status, capturePath, records, records*summaryBytesPerRecord, free)
	}
	c, err := capture.Load(capturePath)
	var corrupt *capture.CorruptError
	if err != nil && !errors.As(err, &corrupt) {
		return err
	}
	stack.Stitch(c)
	if len(c.Meta.Command) == 0 {
		c.Meta.Command = command
	}
	rp := heap.NewReplay(c, heap.Options{}) // one replay for every figure
	if err := export.Summary(w, c, heap.Allocs(c, heap.Options{}), rp.Leaks(heap.Options{}),
		export.SummaryOptions{Status: status, Capture: capturePath, Peak: rp.Peak(heap.Options{}), Timeline: rp.Timeline(), Gap: rp.RSSGap()}); err != nil {
		return err
	}
	for _, p := range c.Processes {
		if p.PythonNote != "" {
			fmt.Fprintf(w, "  pid %d: %s\n", p.PID, p.PythonNote)
		}
	}
	return err // a damaged capture is still summarised, then reported
}
