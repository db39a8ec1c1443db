package heap

import (
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// twoStreams: stream 1 holds A (100 B) over [1, 5); stream 2 holds B (80 B,
// thread 2) over [3, 7) and C (150 B) from 8 to its end at 20. The sum over
// time is 100, 180, 80, 0, 150: the tree's peak is 180 at t=3, while the
// per-stream peaks (100 at 1, 150 at 8) would add up to a wrong 250.
func twoStreams() *capture.Capture {
	b := alloc(2, 3, 0xb, 80, 2)
	b.TID = 2
	c := synth(1, []capture.Alloc{
		alloc(1, 1, 0xa, 100, 1),
		b,
		alloc(2, 8, 0xc, 150, 3),
	}, []capture.Free{free(1, 5, 0xa), free(2, 7, 0xb)}, []int{2, 2})
	c.Ends[2] = &capture.End{Stream: 2, TimeNano: 20}
	return c
}

func stacksOf(p *Profile) map[uint64]float64 {
	m := map[uint64]float64{}
	for _, s := range p.Samples {
		m[s.StackID] += s.Bytes
	}
	return m
}

func equalStacks(a, b map[uint64]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestSnapshotViews(t *testing.T) {
	c := twoStreams()
	tests := []struct {
		name   string
		p      *Profile
		want   map[uint64]float64
		at     int64
		heapAt float64
	}{
		{"peak of the tree", Peak(c, Options{}), map[uint64]float64{1: 100, 2: 80}, 3, 180},
		{"peak of stream 1", Peak(c, Options{Stream: 1}), map[uint64]float64{1: 100}, 1, 100},
		{"peak of stream 2", Peak(c, Options{Streams: []uint32{2}}), map[uint64]float64{3: 150}, 8, 150},
		{"peak, thread 2 only", Peak(c, Options{Thread: 2}), map[uint64]float64{2: 80}, 3, 180},
		{"peak, stack filter", Peak(c, Options{KeepStack: func(s uint64) bool { return s != 1 }}), map[uint64]float64{2: 80}, 3, 180},
		{"live at 4", Live(c, Options{}, 4), map[uint64]float64{1: 100, 2: 80}, 4, 180},
		{"live at 5 (free at 5 applied)", Live(c, Options{}, 5), map[uint64]float64{2: 80}, 5, 80},
		{"live at 0", Live(c, Options{}, 0), map[uint64]float64{}, 0, 0},
		{"live at end", Live(c, Options{}, 100), map[uint64]float64{3: 150}, 100, 150},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stacksOf(tt.p); !equalStacks(got, tt.want) {
				t.Errorf("stacks = %v, want %v", got, tt.want)
			}
			if tt.p.At != tt.at || tt.p.HeapAt != tt.heapAt {
				t.Errorf("At %d HeapAt %v, want %d, %v", tt.p.At, tt.p.HeapAt, tt.at, tt.heapAt)
			}
		})
	}
}

func TestTemporaryAndMinAge(t *testing.T) {
	c := twoStreams()
	tests := []struct {
		name string
		p    *Profile
		want map[uint64]float64
	}{
		{"temporary 3ns", Temporary(c, Options{}, 3), map[uint64]float64{}},
		{"temporary 4ns", Temporary(c, Options{}, 4), map[uint64]float64{1: 100, 2: 80}},
		{"temporary default", Temporary(c, Options{}, 0), map[uint64]float64{1: 100, 2: 80}},
		{"temporary stream 1", Temporary(c, Options{Stream: 1}, time.Second), map[uint64]float64{1: 100}},
		{"leaks", Leaks(c, Options{}), map[uint64]float64{3: 150}},
		{"leaks min-age 12ns", Leaks(c, Options{MinAge: 12}), map[uint64]float64{3: 150}},
		{"leaks min-age 13ns", Leaks(c, Options{MinAge: 13}), map[uint64]float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stacksOf(tt.p); !equalStacks(got, tt.want) {
				t.Errorf("stacks = %v, want %v", got, tt.want)
			}
		})
	}
	if p := Temporary(c, Options{}, 0); p.Lifetime != DefaultLifetime {
		t.Errorf("default lifetime %v, want %v", p.Lifetime, DefaultLifetime)
	}
}

func TestByThread(t *testing.T) {
	c := twoStreams()
	c.Allocs = append(c.Allocs, capture.Alloc{Stream: 2, TID: 9, TimeNano: 9, Addr: 0xd, Size: 5, StackID: 3})
	p := Allocs(c, Options{ByThread: true})
	n := 0
	for _, s := range p.Samples {
		if s.StackID == 3 {
			n++
		}
	}
	if n != 2 {
		t.Errorf("stack 3 from threads 1 and 9: %d samples, want 2: %+v", n, p.Samples)
	}
	if got := len(Allocs(c, Options{}).Samples); got != 3 {
		t.Errorf("without ByThread: %d samples, want 3", got)
	}
}

func TestTimeline(t *testing.T) {
	c := twoStreams()
	c.RSS = []capture.RSS{{Stream: 1, TimeNano: 2, Bytes: 1000}, {Stream: 2, TimeNano: 2, Bytes: 500}, {Stream: 2, TimeNano: 6, Bytes: 2000}}
	tl := TimelineOf(c, Options{})
	if tl.Peak != (Point{3, 180}) {
		t.Errorf("Peak = %+v, want 180 at 3", tl.Peak)
	}
	if tl.PeakRSS != (Point{6, 2000}) || len(tl.TotalRSS) != 2 || tl.TotalRSS[0] != (Point{2, 1500}) {
		t.Errorf("RSS: peak %+v, total %+v", tl.PeakRSS, tl.TotalRSS)
	}
	if tl.Start != 1 || tl.End != 20 {
		t.Errorf("bounds [%d, %d], want [1, 20]", tl.Start, tl.End)
	}
	want := []Point{{1, 100}, {3, 180}, {5, 80}, {7, 0}, {8, 150}}
	if len(tl.Total) != len(want) {
		t.Fatalf("Total = %+v, want %+v", tl.Total, want)
	}
	for i := range want {
		if tl.Total[i] != want[i] {
			t.Errorf("Total[%d] = %+v, want %+v", i, tl.Total[i], want[i])
		}
	}
	if len(tl.Streams) != 2 || tl.Streams[0].Peak != (Point{1, 100}) || tl.Streams[1].Peak != (Point{8, 150}) {
		t.Errorf("stream peaks: %+v", tl.Streams)
	}
}

// TestTimelineDownsampleKeepsSpikes: a one-event spike among many events
// survives downsampling to timelinePoints buckets.
func TestTimelineDownsampleKeepsSpikes(t *testing.T) {
	var allocs []capture.Alloc
	var frees []capture.Free
	var order []int
	for i := range 100000 {
		size := uint64(10)
		if i == 54321 {
			size = 1 << 20
		}
		allocs = append(allocs, alloc(1, int64(2*i), uint64(0x1000+i), size, 1))
		frees = append(frees, free(1, int64(2*i+1), uint64(0x1000+i)))
		order = append(order, i+1)
	}
	tl := TimelineOf(synth(1, allocs, frees, order), Options{})
	if len(tl.Total) > timelinePoints+1 {
		t.Errorf("%d points, want at most %d", len(tl.Total), timelinePoints+1)
	}
	found := false
	for _, p := range tl.Total {
		if p.Bytes == 1<<20 {
			found = true
		}
	}
	if !found || tl.Peak != (Point{2 * 54321, 1 << 20}) {
		t.Errorf("spike lost: peak %+v, found %v", tl.Peak, found)
	}
}
