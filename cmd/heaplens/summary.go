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

// summaryBytesPerRecord is what a summary from memory takes for each
// sampled allocation or free it loads and replays: 61 bytes of RSS
// measured on 8 M records (--rate 1), with room to spare.
const summaryBytesPerRecord = 100

// summaryFits reports whether summarising records from memory takes at
// most half of the memory free, so that the summary never runs the
// machine (or the container) out of memory after the command is done.
func summaryFits(records, free uint64) bool {
	return records <= free/2/summaryBytesPerRecord
}

// printSummary prints the summary of a run or an attach session from its
// capture; status says how it ended; command is what was run, for a
// capture that lost its first record; seen, if not nil, is what the
// capture's writer was seen to write.
func printSummary(w io.Writer, capturePath, status string, command []string, seen *seenCapture) (err error) {
	defer func() {
		// A bug in the summary must not cost the command's exit status.
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error, please report it: %v", r)
		}
	}()
	c, sum, err := summarize(capturePath, seen)
	var big *tooLarge
	if errors.As(err, &big) {
		return export.SummaryTooLarge(w, command, status, capturePath, big.records, big.records*summaryBytesPerRecord, big.free)
	}
	var corrupt *capture.CorruptError
	if err != nil && (sum == nil || !errors.As(err, &corrupt)) {
		return err
	}
	if len(c.Meta.Command) == 0 {
		c.Meta.Command = command
	}
	if err := export.Summary(w, c, sum, export.SummaryOptions{Status: status, Capture: capturePath}); err != nil {
		return err
	}
	for _, n := range export.AllocatorNotes(c, nil) {
		fmt.Fprintf(w, "  %s\n", n)
	}
	return err // a damaged capture is still summarised, then reported
}

// seenCapture is what the summary learns of a capture as it is written
// (capture.Skeleton): the summary then reads the file once, not twice.
type seenCapture struct {
	skel *capture.Skeleton
	pre  *heap.Prescan
}

func newSeenCapture() *seenCapture {
	pre := heap.NewPrescan()
	return &seenCapture{capture.NewSkeleton(pre.Observe), pre}
}

// observer returns o and the seenCapture, both to see what is written.
func (s *seenCapture) observer(o capture.Observer) capture.Observer {
	if o == nil {
		return s.skel
	}
	return capture.Observers(o, s.skel)
}

// tooLarge says a capture is too far from time order to be summarised as
// it is read, and too large to be summarised from memory.
type tooLarge struct{ records, free uint64 }

func (e *tooLarge) Error() string {
	return fmt.Sprintf("%d records: too many to summarise with %d bytes free", e.records, e.free)
}

// summarize summarises a capture. It streams the capture's events
// (heap.Summarize), taking memory in proportion to the live heap's
// samples and the stacks, not to the run's length, unless they are so far
// from time order that much would be held back anyway (several processes
// at work at once, a new ring's first records read at the agent's next
// poll), when it replays them from memory if that fits. With what was seen written, it reads the
// file once; should the file differ (a write failed), it reads it again
// from the start. A damaged capture is summarised up to the damage, and
// the *capture.CorruptError returned with the summary.
func summarize(path string, seen *seenCapture) (*capture.Capture, *heap.Summary, error) {
	if seen != nil {
		if c, err := seen.skel.Capture(); err == nil {
			c, sum, err := summarizeFrom(path, c, seen.pre, nil)
			var big *tooLarge
			if err == nil || errors.As(err, &big) {
				return c, sum, err
			}
		}
	}
	pre := heap.NewPrescan()
	c, loadErr := capture.LoadEvents(path, pre.Observe)
	var corrupt *capture.CorruptError
	if loadErr != nil && !errors.As(loadErr, &corrupt) {
		return nil, nil, loadErr
	}
	return summarizeFrom(path, c, pre, loadErr)
}

// summarizeFrom is summarize once the capture without its events is read
// (loadErr: how that went).
func summarizeFrom(path string, c *capture.Capture, pre *heap.Prescan, loadErr error) (*capture.Capture, *heap.Summary, error) {
	records := uint64(pre.Events())
	free, known := sysmem.Available()
	fits := !known || summaryFits(records, free)
	if fits && pre.Held() > pre.Events()/4 {
		return fromMemory(path)
	}
	st := stack.ForCapture(c)
	sum, err := heap.Summarize(c, pre, func(fn func(*capture.Record) bool) error {
		return capture.ScanEvents(path, pre.Events(), func(rec *capture.Record) bool {
			if rec.Type == capture.RecAlloc {
				st.Alloc(&rec.Alloc)
			}
			return fn(rec)
		})
	})
	switch {
	case errors.Is(err, heap.ErrReorder) && fits:
		return fromMemory(path)
	case errors.Is(err, heap.ErrReorder):
		return c, nil, &tooLarge{records, free}
	case err != nil:
		return c, nil, err
	}
	return c, sum, loadErr
}

// fromMemory summarises a capture loaded whole.
func fromMemory(path string) (*capture.Capture, *heap.Summary, error) {
	c, err := capture.Load(path)
	if c == nil {
		return nil, nil, err
	}
	stack.Stitch(c)
	return c, heap.NewReplay(c, heap.Options{}).Summary(), err
}
