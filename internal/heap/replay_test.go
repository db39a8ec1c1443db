package heap

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// twoStreams: stream 1 holds A (100 B) over [1, 5); stream 2 holds B (80 B,
// thread 2) over [3, 7) and C (150 B) from 8 to its end at 20. The sum over
// time is 100, 180, 80, 0, 150, then 0 when stream 2 ends: the tree's peak is
// 180 at t=3, while the per-stream peaks (100 at 1, 150 at 8) would add up to
// a wrong 250.
func twoStreams() *capture.Capture {
	b := alloc(2, 3, 0xb, 80, 2)
	b.TID = 2
	c := synth(1, []capture.Alloc{
		alloc(1, 1, 0xa, 100, 1),
		b,
		alloc(2, 8, 0xc, 150, 3),
	}, []capture.Free{free(1, 5, 0xa), free(2, 7, 0xb)}, []int32{2, 2})
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
		{"peak of stream 1", Peak(c, Options{Streams: []uint32{1}}), map[uint64]float64{1: 100}, 1, 100},
		{"peak of stream 2", Peak(c, Options{Streams: []uint32{2}}), map[uint64]float64{3: 150}, 8, 150},
		{"peak, thread 2 only", Peak(c, Options{Thread: 2}), map[uint64]float64{2: 80}, 3, 180},
		{"peak, stack filter", Peak(c, Options{KeepStack: func(s uint64) bool { return s != 1 }}), map[uint64]float64{2: 80}, 3, 180},
		{"live at 4", Live(c, Options{}, 4), map[uint64]float64{1: 100, 2: 80}, 4, 180},
		{"live at 5 (free at 5 applied)", Live(c, Options{}, 5), map[uint64]float64{2: 80}, 5, 80},
		{"live at 0", Live(c, Options{}, 0), map[uint64]float64{}, 0, 0},
		{"live before stream 2 ends", Live(c, Options{}, 19), map[uint64]float64{3: 150}, 19, 150},
		{"live after every process ended", Live(c, Options{}, 100), map[uint64]float64{}, 100, 0},
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
		{"temporary stream 1", Temporary(c, Options{Streams: []uint32{1}}, time.Second), map[uint64]float64{1: 100}},
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
	// Stream 1, not read at 6 and not ended, counts with its reading at 2.
	if tl.PeakRSS != (Point{6, 3000}) || len(tl.TotalRSS) != 2 || tl.TotalRSS[0] != (Point{2, 1500}) {
		t.Errorf("RSS: peak %+v, total %+v", tl.PeakRSS, tl.TotalRSS)
	}
	// Ended at 4, it does not; a process's own reading, later in the file
	// than the agent's round at 6, takes its place in time.
	c.Ends[1] = &capture.End{Stream: 1, TimeNano: 4}
	c.RSS = append(c.RSS, capture.RSS{Stream: 1, TimeNano: 3, Bytes: 1200})
	if got := TimelineOf(c, Options{}).TotalRSS; !slices.Equal(got, []Point{{2, 1500}, {3, 1700}, {6, 2000}}) {
		t.Errorf("RSS with stream 1 ended at 4: total %+v, want 1500 at 2, 1700 at 3, 2000 at 6", got)
	}
	delete(c.Ends, 1)
	c.RSS = c.RSS[:3]
	if tl.Start != 1 || tl.End != 20 {
		t.Errorf("bounds [%d, %d], want [1, 20]", tl.Start, tl.End)
	}
	want := []Point{{1, 100}, {3, 180}, {5, 80}, {7, 0}, {8, 150}, {20, 0}}
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
	var order []int32
	for i := range 100000 {
		size := uint64(10)
		if i == 54321 {
			size = 1 << 20
		}
		allocs = append(allocs, alloc(1, int64(2*i), uint64(0x1000+i), size, 1))
		frees = append(frees, free(1, int64(2*i+1), uint64(0x1000+i)))
		order = append(order, int32(i+1))
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

// peakTies is one stream at rate 1 (every weight is 1):
//
//	t=10  free 0xf00 (unmatched)                  heap   0
//	t=11  alloc A 0xa 100 B, stack 1                    100
//	t=12  alloc B 0xb  50 B, stack 2                    150
//	t=13  free A, then alloc C 0xc 120 B, stack 3       170 (50 between)
//	t=14  alloc D 0xd  40 B, stack 4                    210
//	t=15  alloc E 0xe  30 B, stack 5, then free D       200 (240 between)
//	t=16  free 0xdead (unmatched)                       200
//	t=17  alloc F 0xb  10 B, stack 6: B's free was lost 160
//
// The peak view counts the state after every event: 240 at t=15, between
// E's alloc and D's free, with B, C, D and E live, one unmatched free so
// far and no lost one. The timeline only counts the state after the last
// event of a time: its peak is 210 at t=14.
func peakTies() *capture.Capture {
	return synth(1, []capture.Alloc{
		alloc(1, 11, 0xa, 100, 1),
		alloc(1, 12, 0xb, 50, 2),
		alloc(1, 13, 0xc, 120, 3),
		alloc(1, 14, 0xd, 40, 4),
		alloc(1, 15, 0xe, 30, 5),
		alloc(1, 17, 0xb, 10, 6),
	}, []capture.Free{
		free(1, 10, 0xf00),
		free(1, 13, 0xa),
		free(1, 15, 0xd),
		free(1, 16, 0xdead),
	}, []int32{0, 2, 5, 5})
}

// TestReplayViews checks the peak view, the leaks view and the timeline of
// hand-built captures, each from its own replay (Peak, Leaks, TimelineOf)
// and from one Replay shared by all three.
func TestReplayViews(t *testing.T) {
	tests := []struct {
		name         string
		c            *capture.Capture
		opt          Options
		stacks       map[uint64]float64
		at           int64
		heapAt       float64
		unmatched    int
		lost         int
		tlPeak       Point
		total        []Point
		streamPeaks  []Point
		leaks        map[uint64]float64
		endUnmatched int
		endLost      int
	}{
		{
			name: "ties", c: peakTies(),
			stacks: map[uint64]float64{2: 50, 3: 120, 4: 40, 5: 30}, at: 15, heapAt: 240, unmatched: 1,
			tlPeak:      Point{14, 210},
			total:       []Point{{10, 0}, {11, 100}, {12, 150}, {13, 170}, {14, 210}, {15, 200}, {16, 200}, {17, 160}},
			streamPeaks: []Point{{14, 210}, {}},
			leaks:       map[uint64]float64{3: 120, 5: 30, 6: 10}, endUnmatched: 2, endLost: 1,
		},
		{
			name: "ties, thread filter", c: peakTies(), opt: Options{Thread: 7},
			stacks: map[uint64]float64{}, at: 15, heapAt: 240, unmatched: 1,
			tlPeak:      Point{14, 210},
			total:       []Point{{10, 0}, {11, 100}, {12, 150}, {13, 170}, {14, 210}, {15, 200}, {16, 200}, {17, 160}},
			streamPeaks: []Point{{14, 210}, {}},
			leaks:       map[uint64]float64{}, endUnmatched: 2, endLost: 1,
		},
		{
			name: "two streams", c: twoStreams(),
			stacks: map[uint64]float64{1: 100, 2: 80}, at: 3, heapAt: 180,
			tlPeak:      Point{3, 180},
			total:       []Point{{1, 100}, {3, 180}, {5, 80}, {7, 0}, {8, 150}, {20, 0}},
			streamPeaks: []Point{{1, 100}, {8, 150}},
			leaks:       map[uint64]float64{3: 150},
		},
		{
			name: "stream 2 only", c: twoStreams(), opt: Options{Streams: []uint32{2}},
			stacks: map[uint64]float64{3: 150}, at: 8, heapAt: 150,
			tlPeak:      Point{8, 150},
			total:       []Point{{3, 80}, {7, 0}, {8, 150}, {20, 0}},
			streamPeaks: []Point{{8, 150}},
			leaks:       map[uint64]float64{3: 150},
		},
		{
			// The heap never rises above 0: the peak is the empty live set
			// at the start, before any event, so before the unmatched free.
			name: "no allocation", c: synth(1, nil, []capture.Free{free(1, 4, 0xa)}, []int32{0}),
			stacks: map[uint64]float64{}, at: 4, heapAt: 0,
			total:       []Point{{4, 0}},
			streamPeaks: []Point{{}, {}},
			leaks:       map[uint64]float64{}, endUnmatched: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp := NewReplay(tt.c, tt.opt)
			p, tl, l := rp.Peak(tt.opt), rp.Timeline(), rp.Leaks(tt.opt)
			for _, pk := range []*Profile{p, Peak(tt.c, tt.opt)} {
				if got := stacksOf(pk); !equalStacks(got, tt.stacks) {
					t.Errorf("peak stacks = %v, want %v", got, tt.stacks)
				}
				if pk.View != "peak" || pk.At != tt.at || pk.HeapAt != tt.heapAt {
					t.Errorf("peak %q at %d of %v, want %q at %d of %v", pk.View, pk.At, pk.HeapAt, "peak", tt.at, tt.heapAt)
				}
				if pk.UnmatchedFrees != tt.unmatched || pk.LostFrees != tt.lost {
					t.Errorf("at the peak: %d unmatched, %d lost frees; want %d, %d", pk.UnmatchedFrees, pk.LostFrees, tt.unmatched, tt.lost)
				}
			}
			for _, tl := range []*Timeline{tl, TimelineOf(tt.c, tt.opt)} {
				if tl.Peak != tt.tlPeak {
					t.Errorf("timeline peak %+v, want %+v", tl.Peak, tt.tlPeak)
				}
				if !slices.Equal(tl.Total, tt.total) {
					t.Errorf("timeline total %+v, want %+v", tl.Total, tt.total)
				}
				var peaks []Point
				for _, s := range tl.Streams {
					peaks = append(peaks, s.Peak)
				}
				if !slices.Equal(peaks, tt.streamPeaks) {
					t.Errorf("stream peaks %+v, want %+v", peaks, tt.streamPeaks)
				}
			}
			for _, l := range []*Profile{l, Leaks(tt.c, tt.opt)} {
				if got := stacksOf(l); l.View != "leaks" || !equalStacks(got, tt.leaks) {
					t.Errorf("%s = %v, want leaks %v", l.View, got, tt.leaks)
				}
				if l.UnmatchedFrees != tt.endUnmatched || l.LostFrees != tt.endLost {
					t.Errorf("at the end: %d unmatched, %d lost frees; want %d, %d", l.UnmatchedFrees, l.LostFrees, tt.endUnmatched, tt.endLost)
				}
			}
		})
	}
}

// churn builds a capture shaped like the synthetic one of hlbench compare:
// n allocations at the default rate whose live set grows to n/10 blocks,
// after which each allocation frees a random live block.
func churn(n int) *capture.Capture {
	rng := rand.New(rand.NewPCG(7, 11))
	var allocs []capture.Alloc
	var frees []capture.Free
	var order []int32
	live := make([]uint64, 0, n/10)
	t, addr := int64(1e9), uint64(0x5555_0000_0000)
	for range n {
		t += 1 + int64(rng.ExpFloat64()*20_000)
		if len(live) >= n/10 {
			k := rng.IntN(len(live))
			frees = append(frees, free(1, t, live[k]))
			order = append(order, int32(len(allocs)))
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		addr += 4096
		allocs = append(allocs, alloc(1, t, addr, uint64(64+rng.ExpFloat64()*200_000), uint64(1+rng.IntN(10_000))))
		live = append(live, addr)
	}
	return synth(512<<10, allocs, frees, order)
}

// BenchmarkReplay times the replay of a capture of 1M samples (100k live)
// and the views read from it.
func BenchmarkReplay(b *testing.B) {
	c := churn(1_000_000)
	views := []struct {
		name string
		f    func()
	}{
		{"NewReplay", func() { NewReplay(c, Options{}) }},
		{"NewReplay+Peak+Leaks", func() { rp := NewReplay(c, Options{}); rp.Peak(Options{}); rp.Leaks(Options{}) }},
	}
	for _, v := range views {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.f()
			}
		})
	}
}

// processTree: stream 1 is a parent holding 10 B for the whole run; each
// child (streams 2 and 3) holds 50 B from its start until it exits without
// freeing. Sequential: child 2 lives over [2, 4), child 3 over [6, 8), so the
// tree never holds more than 60 B. Overlapping: child 3 starts at 3, while
// child 2 still runs, so the tree holds 110 B over [3, 4).
func processTree(overlap bool) *capture.Capture {
	start3 := int64(6)
	if overlap {
		start3 = 3
	}
	c := synth(1, []capture.Alloc{
		alloc(1, 1, 0x1, 10, 1),
		alloc(2, 2, 0x2, 50, 2),
		alloc(3, start3, 0x3, 50, 3),
	}, nil, nil)
	c.Ends[2] = &capture.End{Stream: 2, TimeNano: 4, Known: true}
	c.Ends[3] = &capture.End{Stream: 3, TimeNano: 8, Known: true}
	c.Ends[1] = &capture.End{Stream: 1, TimeNano: 10, Known: true}
	return c
}

func TestProcessTreeEnds(t *testing.T) {
	tests := []struct {
		name    string
		overlap bool
		peak    float64
		peakAt  int64
		stacks  map[uint64]float64
		liveAt5 map[uint64]float64
		total   []Point
	}{
		{"sequential", false, 60, 2, map[uint64]float64{1: 10, 2: 50}, map[uint64]float64{1: 10},
			[]Point{{1, 10}, {2, 60}, {4, 10}, {6, 60}, {8, 10}, {10, 0}}},
		{"overlapping", true, 110, 3, map[uint64]float64{1: 10, 2: 50, 3: 50}, map[uint64]float64{1: 10, 3: 50},
			[]Point{{1, 10}, {2, 60}, {3, 110}, {4, 60}, {8, 10}, {10, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := processTree(tt.overlap)
			for _, p := range []*Profile{Peak(c, Options{}), NewReplay(c, Options{}).Peak(Options{})} {
				if p.HeapAt != tt.peak || p.At != tt.peakAt || !equalStacks(stacksOf(p), tt.stacks) {
					t.Errorf("peak %v at %d with %v; want %v at %d with %v", p.HeapAt, p.At, stacksOf(p), tt.peak, tt.peakAt, tt.stacks)
				}
			}
			if l := Live(c, Options{}, 5); !equalStacks(stacksOf(l), tt.liveAt5) || l.HeapAt != 10+tt.liveAt5[3] {
				t.Errorf("live at 5: %v (heap %v), want %v", stacksOf(l), l.HeapAt, tt.liveAt5)
			}
			for _, tl := range []*Timeline{TimelineOf(c, Options{}), NewReplay(c, Options{}).Timeline()} {
				if !slices.Equal(tl.Total, tt.total) || tl.Peak != (Point{tt.peakAt, tt.peak}) {
					t.Errorf("timeline %+v peak %+v, want %+v peak %v at %d", tl.Total, tl.Peak, tt.total, tt.peak, tt.peakAt)
				}
			}
			// Leaks: every child's block was live when it exited.
			if l := Leaks(c, Options{}); !equalStacks(stacksOf(l), map[uint64]float64{1: 10, 2: 50, 3: 50}) {
				t.Errorf("leaks %v, want every block", stacksOf(l))
			}
		})
	}
}
