package export

import (
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// WindowDoc is the JSON heaplens window writes for one window: the
// estimates of what it allocated, peaked at and kept, each with its 95 %
// interval and its top stacks (docs/pytest.md).
type WindowDoc struct {
	Name      string       `json:"name"`
	Window    string       `json:"window"` // as heaplens report --window takes it
	Allocated WindowFigure `json:"allocated"`
	Peak      WindowFigure `json:"peak"`
	Leaked    WindowFigure `json:"leaked"`
}

// WindowFigure is one estimate and the stacks that hold most of it.
type WindowFigure struct {
	Bytes float64       `json:"bytes"`
	CI95  float64       `json:"ci95"` // half-width of the 95 % interval; 0 at rate 1
	Top   []WindowStack `json:"top"`
}

// WindowStack is one stack's share: frames leaf first, as the text report
// labels them.
type WindowStack struct {
	Bytes  float64  `json:"bytes"`
	CI95   float64  `json:"ci95"`
	Frames []string `json:"frames"`
}

// NewWindowDoc summarizes the views of the window [from, until]
// (CLOCK_MONOTONIC) with top stacks each.
func NewWindowDoc(c *capture.Capture, name string, from, until int64, v heap.WindowViews, top int) WindowDoc {
	start := heap.Start(c)
	return WindowDoc{Name: name, Window: time.Duration(from-start).String() + "," + time.Duration(until-start).String(),
		Allocated: figure(c, v.Allocs, top), Peak: figure(c, v.Peak, top), Leaked: figure(c, v.Leaks, top)}
}

func figure(c *capture.Capture, p *heap.Profile, top int) WindowFigure {
	f := WindowFigure{Bytes: p.TotalBytes, CI95: heap.CI95(p.TotalVar), Top: []WindowStack{}}
	for _, s := range p.Samples[:min(top, len(p.Samples))] { // a view's samples come biggest first
		f.Top = append(f.Top, WindowStack{Bytes: s.Bytes, CI95: heap.CI95(s.Var), Frames: StackFrames(c, s.StackID)})
	}
	return f
}
