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

// Each kind of loss is named with the direction it biases the view.
func TestSkewNotesDirection(t *testing.T) {
	drops := map[uint32]heap.DropStats{1: {DroppedFrees: 3}}
	tests := []struct {
		view string
		want string // "" = no note
	}{
		{"allocs", ""},
		{"leaks", "leaks may be high"},
		{"live", "live may be high"},
		{"peak", "peak may be high"},
		{"temporary", "temporary may be low"},
	}
	for _, tt := range tests {
		got := strings.Join(skewNotes(&heap.Profile{View: tt.view, Drops: drops}), "|")
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s with dropped frees: %q, want %q", tt.view, got, tt.want)
		}
		got = strings.Join(skewNotes(&heap.Profile{View: tt.view, Drops: map[uint32]heap.DropStats{1: {DroppedAllocs: 2}}}), "|")
		if got != "2 allocation records dropped: estimates are low" {
			t.Errorf("%s with dropped allocations: %q", tt.view, got)
		}
	}
}
