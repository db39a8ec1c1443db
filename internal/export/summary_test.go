package export

import (
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// TestSummaryNothingSampled: a command that allocated nothing the sampler
// saw has a peak of 0 B with no moment — not one before the capture began.
func TestSummaryNothingSampled(t *testing.T) {
	c := capture.NewCapture()
	c.Meta = capture.Meta{Rate: 512 << 10, Command: []string{"true"}}
	c.Processes = []*capture.Process{{Stream: 1, PID: 100, Exe: "/usr/bin/true"}}
	c.RSS = []capture.RSS{{Stream: 1, TimeNano: 5e9, Bytes: 1 << 20}, {Stream: 1, TimeNano: 6e9, Bytes: 2 << 20}}
	peak, tl := heap.PeakAndTimeline(c, heap.Options{})
	var sum strings.Builder
	if err := Summary(&sum, c, heap.Allocs(c, heap.Options{}), heap.Leaks(c, heap.Options{}),
		SummaryOptions{Status: "exited with status 0", Capture: "x.hlc", Peak: peak, Timeline: tl}); err != nil {
		t.Fatal(err)
	}
	var view strings.Builder
	if err := TimelineText(&view, c, tl); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"summary": sum.String(), "timeline": view.String()} {
		if !strings.Contains(out, "estimated heap (nothing sampled)") || strings.Contains(out, " at -") {
			t.Errorf("%s of an empty capture:\n%s", name, out)
		}
		if !strings.Contains(out, "2.0 MiB at 1.000 s") {
			t.Errorf("%s lost the RSS peak's moment:\n%s", name, out)
		}
	}
}
