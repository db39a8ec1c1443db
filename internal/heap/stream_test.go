package heap

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

// fileOrder returns a capture's Allocs and Frees as records in file order
// (Capture.FreeOrder).
func fileOrder(c *capture.Capture) []capture.Record {
	var out []capture.Record
	j := 0
	for i := 0; i <= len(c.Allocs); i++ {
		for ; j < len(c.Frees) && int(c.FreeOrder[j]) <= i; j++ {
			out = append(out, capture.Record{Type: capture.RecFree, Free: c.Frees[j]})
		}
		if i < len(c.Allocs) {
			out = append(out, capture.Record{Type: capture.RecAlloc, Alloc: c.Allocs[i]})
		}
	}
	return out
}

// asFile returns c's events as a file hands them over, their Prescan, and
// c without them, as capture.LoadEvents returns it.
func asFile(c *capture.Capture) ([]capture.Record, *Prescan, *capture.Capture) {
	recs := fileOrder(c)
	pre := NewPrescan()
	for i := range recs {
		pre.Observe(&recs[i])
	}
	bare := *c
	bare.Allocs, bare.Frees, bare.FreeOrder = nil, nil, nil
	return recs, pre, &bare
}

// streamed is Summarize of c, its events handed over as a file would.
func streamed(t *testing.T, c *capture.Capture) *Summary {
	t.Helper()
	recs, pre, bare := asFile(c)
	scans := 0
	s, err := Summarize(bare, pre, func(fn func(*capture.Record) bool) error {
		scans++
		for i := range recs {
			rec := recs[i] // fn may not keep it, as with capture.ScanEvents
			if !fn(&rec) {
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	if want := 2; scans > want || c.Meta.Rate <= 1 && scans != 1 {
		t.Errorf("Summarize read the events %d times at rate %d, want once at rate 1, at most twice else", scans, c.Meta.Rate)
	}
	return s
}

// messy is a capture of three processes with what real ones hold, at
// random: threads whose records reach the file out of time order, several
// events at one time, frees of blocks never seen, lost frees (an address
// allocated twice), processes that end (some with an End stamped before
// their last record) and one that does not, three kinds of memory, RSS and
// malloc statistics.
func messy(seed, rate uint64, n int) *capture.Capture {
	rng := rand.New(rand.NewPCG(seed, 99))
	c := capture.NewCapture()
	c.Meta.Rate = rate
	for s := uint32(1); s <= 3; s++ {
		c.Processes = append(c.Processes, &capture.Process{Stream: s, PID: int(100 * s), StartMonoNano: 1000 + int64(s)})
	}
	funcs := []uint8{capture.FuncMalloc, capture.FuncCalloc, capture.FuncPyMemMalloc, capture.FuncMmap}
	type block struct {
		stream uint32
		addr   uint64
	}
	var live []block
	clock, end3 := int64(2000), int64(0)
	for len(c.Allocs)+len(c.Frees) < n {
		if end3 == 0 && len(c.Allocs)+len(c.Frees) > n/3 {
			end3 = clock
		}
		clock += int64(rng.IntN(3))     // ties are common
		t := clock - int64(rng.IntN(4)) // a thread's record written a little late
		s := uint32(1 + rng.IntN(3))
		if s == 3 && len(c.Allocs)+len(c.Frees) > n/3 {
			s = uint32(1 + rng.IntN(2)) // process 3 has ended
		}
		switch r := rng.IntN(10); {
		case r < 5 || len(live) == 0:
			addr := uint64(0x1000 + 16*rng.IntN(4000)) // reused addresses: lost frees
			size := uint64(1 + rng.IntN(5000))
			if rng.IntN(50) == 0 {
				size = 0
			}
			c.Allocs = append(c.Allocs, capture.Alloc{Stream: s, TID: uint32(1 + rng.IntN(3)), TimeNano: t, Addr: addr,
				Size: size, StackID: uint64(1 + rng.IntN(40)), Func: funcs[rng.IntN(len(funcs))]})
			live = append(live, block{s, addr})
		case r < 9:
			k := rng.IntN(len(live))
			if b := live[k]; b.stream == 3 && len(c.Allocs)+len(c.Frees) > n/3 {
				continue
			}
			b := live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			c.Frees = append(c.Frees, capture.Free{Stream: b.stream, TID: 1, TimeNano: t, Addr: b.addr})
			c.FreeOrder = append(c.FreeOrder, int32(len(c.Allocs)))
		default: // a block allocated before the library loaded
			c.Frees = append(c.Frees, capture.Free{Stream: s, TID: 1, TimeNano: t, Addr: 0x900000 + uint64(rng.IntN(100))})
			c.FreeOrder = append(c.FreeOrder, int32(len(c.Allocs)))
		}
		if rng.IntN(200) == 0 {
			c.RSS = append(c.RSS, capture.RSS{Stream: s, TimeNano: t, Bytes: uint64(rng.IntN(1 << 30))})
			c.Mallocs = append(c.Mallocs, capture.Malloc{Stream: s, TimeNano: t, InUse: uint64(rng.IntN(1 << 30)), Free: uint64(rng.IntN(1 << 30))})
		}
	}
	c.Ends[1] = &capture.End{Stream: 1, TimeNano: clock / 2, DroppedFrees: 3} // before its last record
	c.Ends[2] = &capture.End{Stream: 2, TimeNano: clock + 5}
	c.Ends[3] = &capture.End{Stream: 3, TimeNano: end3}
	return c
}

// The streamed summary is the in-memory one, exactly: same samples, same
// sums in the same order, whatever the order of the file.
func TestSummarizeIsReplaySummary(t *testing.T) {
	for _, tc := range []struct {
		name       string
		seed, rate uint64
	}{
		{"rate 1", 1, 1},
		{"rate 1 again", 2, 1},
		{"sampled", 3, 4096},
		{"sampled again", 4, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := messy(tc.seed, tc.rate, 20_000)
			want := NewReplay(c, Options{}).Summary()
			got := streamed(t, c)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("streamed summary differs:\n got %s\nwant %s", describe(got), describe(want))
			}
			if want.Peak.RawSamples() == 0 || want.Leaks.RawSamples() == 0 || want.Gap == nil || want.Peak.UnmatchedFrees == 0 || want.Leaks.LostFrees == 0 {
				t.Errorf("the capture misses a case: %s", describe(want))
			}
		})
	}
}

// A loaded replay (replayer: the events in memory) and a streamed one
// (streamer: the events as a file hands them over, out of time order)
// feed one heapState: after any number of events they hold the same sums,
// bit for bit, in all, per stream and per kind of memory, with the same
// counts and ends.
func TestLoadedAndStreamedSumsAgree(t *testing.T) {
	type sums struct {
		Next, Unmatched, Lost, NextEnd int
		Total                          float64
		PerStream                      []float64
		ByKind                         [nKinds]float64
		PerStreamKind                  [][nKinds]float64
		EndedAt                        []int32
	}
	of := func(h *heapState) sums {
		return sums{h.next, h.unmatched, h.lost, h.nextEnd, h.total, h.perStream, h.byKind, h.perStreamKind, h.endedAt}
	}
	for _, rate := range []uint64{1, 4096} {
		c := messy(5, rate, 6000)
		recs, pre, bare := asFile(c)
		loaded := newReplayer(c, Options{})
		n := loaded.ev.len()
		for _, k := range []int{1, 7, n / 3, n/3 + 1, n / 2, n - 1, n} {
			for loaded.next < k {
				loaded.step()
			}
			s := newStreamer(bare, pre, Start(c))
			s.stop = k
			for i := range recs {
				if rec := recs[i]; !s.read(&rec) {
					break
				}
			}
			if err := s.finish(); err != nil {
				t.Fatal(err)
			}
			if got, want := of(&s.heapState), of(&loaded.heapState); !reflect.DeepEqual(got, want) {
				t.Errorf("rate %d, after %d of %d events: streamed\n%+v\nloaded\n%+v", rate, k, n, got, want)
			}
		}
		if h := &loaded.heapState; !h.mixed || h.unmatched == 0 || h.lost == 0 || h.nextEnd == 0 || h.byKind[1] == 0 || h.byKind[2] == 0 {
			t.Errorf("rate %d: the capture misses a case: %+v", rate, of(h))
		}
	}
}

// Cases the random captures may miss give Replay's summary too: a file in
// time order (replayed as it is read), streams interleaved at one time
// (held back), no events, and the moments the timeline and the peak
// depend on.
func TestSummarizeEdges(t *testing.T) {
	sorted := synth(1, []capture.Alloc{alloc(1, 10, 0x10, 100, 1), alloc(2, 10, 0x10, 50, 2), alloc(1, 11, 0x20, 30, 1)},
		[]capture.Free{free(1, 12, 0x10)}, []int32{3})
	ties := synth(1, []capture.Alloc{alloc(2, 10, 0x10, 100, 1), alloc(1, 10, 0x10, 50, 2), alloc(1, 11, 0x20, 30, 1)},
		[]capture.Free{free(1, 10, 0x10)}, []int32{3}) // stream 1's free at 10 goes before stream 2's records at 10
	empty := synth(1, nil, nil, nil)
	// The heap after the last event of a time counts, even when that
	// event is a free of nothing.
	unmatched := synth(1, []capture.Alloc{alloc(1, 10, 0x10, 100, 1)}, []capture.Free{free(1, 10, 0x99), free(1, 11, 0x10)}, []int32{1, 1})
	// A process that ends just after the peak is at the peak.
	endsAfter := synth(1, []capture.Alloc{alloc(2, 5, 0x10, 50, 2), alloc(1, 6, 0x10, 100, 1)}, []capture.Free{free(1, 8, 0x10)}, []int32{2})
	endsAfter.Ends[2] = &capture.End{Stream: 2, TimeNano: 6}
	for name, c := range map[string]*capture.Capture{"sorted": sorted, "ties": ties, "empty": empty, "unmatched": unmatched, "ends after": endsAfter} {
		want := NewReplay(c, Options{}).Summary()
		if got := streamed(t, c); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: streamed summary differs:\n got %s\nwant %s", name, describe(got), describe(want))
		}
	}
}

// Events further out of order than Summarize may hold back are refused
// with ErrReorder, not summarised wrongly.
func TestSummarizeRefusesDisorder(t *testing.T) {
	defer func(n int) { maxHeld = n }(maxHeld)
	maxHeld = 100
	var allocs []capture.Alloc
	allocs = append(allocs, alloc(1, 1_000_000, 0x10, 1, 1)) // one late event holds every one after it back
	for i := range 200 {
		allocs = append(allocs, alloc(1, int64(i), uint64(0x100+16*i), 1, 1))
	}
	c := synth(1, allocs, nil, nil)
	recs := fileOrder(c)
	pre := NewPrescan()
	for i := range recs {
		pre.Observe(&recs[i])
	}
	_, err := Summarize(c, pre, func(fn func(*capture.Record) bool) error {
		for i := range recs {
			if !fn(&recs[i]) {
				break
			}
		}
		return nil
	})
	if err != ErrReorder {
		t.Fatalf("Summarize = %v, want ErrReorder", err)
	}
}

func describe(s *Summary) string {
	return fmt.Sprintf("allocs %d samples %.9g B; leaks %d samples %.9g B, %d unmatched, %d lost; "+
		"peak %d samples %.9g B at %d (heap %.9g, %d unmatched, %d lost); heap peak %v, RSS peak %v, start %d, gap %+v",
		s.Allocs.RawSamples(), s.Allocs.TotalBytes, s.Leaks.RawSamples(), s.Leaks.TotalBytes, s.Leaks.UnmatchedFrees, s.Leaks.LostFrees,
		s.Peak.RawSamples(), s.Peak.TotalBytes, s.Peak.At, s.Peak.HeapAt, s.Peak.UnmatchedFrees, s.Peak.LostFrees,
		s.HeapPeak, s.RSSPeak, s.Start, s.Gap)
}

// held gives back the first of the events it holds, in replay order, however
// pushes and pops interleave.
func TestHeldOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	var h held
	var ref []sevent // what h holds
	for read := 0; read < 20_000; read++ {
		if rng.IntN(3) > 0 || len(ref) == 0 {
			si := uint32(rng.IntN(5))
			e := sevent{key: evKey{int64(read/4 - rng.IntN(6)), 10 + si}, read: read, si: si}
			h.push(&e)
			ref = append(ref, e)
			continue
		}
		first := 0
		for i := range ref {
			if before(&ref[i], &ref[first]) {
				first = i
			}
		}
		if got := *h.pop(); got != ref[first] {
			t.Fatalf("pop %d: got %+v, want %+v", read, got, ref[first])
		}
		ref = append(ref[:first], ref[first+1:]...)
		if h.n != len(ref) {
			t.Fatalf("held %d, want %d", h.n, len(ref))
		}
	}
}

// Held is small for records a little out of order, and most of the
// capture for two processes' records written one after the other.
func TestPrescanHeld(t *testing.T) {
	c := messy(1, 1, 20_000)
	pre := NewPrescan()
	recs := fileOrder(c)
	for i := range recs {
		pre.Observe(&recs[i])
	}
	if h := pre.Held(); h == 0 || h > pre.Events()/100 {
		t.Errorf("Held of records at most 3 ns late over %d ns: %d of %d", c.Allocs[len(c.Allocs)-1].TimeNano, h, pre.Events())
	}
	pre = NewPrescan()
	for _, s := range []uint32{1, 2} {
		for i := range 1000 {
			pre.Observe(&capture.Record{Type: capture.RecAlloc, Alloc: alloc(s, int64(i), uint64(i), 1, 1)})
		}
	}
	if h := pre.Held(); h < pre.Events()*9/10 {
		t.Errorf("Held of two streams written in turns: %d of %d", h, pre.Events())
	}
}

// Events that differ between the two reads (a capture rewritten meanwhile)
// are an error, not a panic or a wrong summary.
func TestSummarizeChangedEvents(t *testing.T) {
	c := synth(1, []capture.Alloc{alloc(1, 10, 0x10, 100, 1), alloc(1, 11, 0x20, 30, 1)}, nil, nil)
	recs := fileOrder(c)
	pre := NewPrescan()
	for i := range recs {
		pre.Observe(&recs[i])
	}
	recs[1].Alloc.Stream = 9
	_, err := Summarize(c, pre, func(fn func(*capture.Record) bool) error {
		for i := range recs {
			if !fn(&recs[i]) {
				break
			}
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "changed between two reads") {
		t.Errorf("Summarize of events that changed: %v", err)
	}
}
