package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// The summary takes about summaryBytesPerRecord per record and must stay
// within half of the memory free.
func TestSummaryFits(t *testing.T) {
	for _, tc := range []struct {
		records, free uint64
		fits          bool
	}{
		{0, 0, true},
		{1, 0, false},
		{10_000_000, 2_000_000_000, true}, // 1 GB of 2
		{10_000_001, 2_000_000_000, false},
		{4_000_000_000, 1 << 40, true},
		{1 << 62, 1 << 63, false}, // no overflow
	} {
		if got := summaryFits(tc.records, tc.free); got != tc.fits {
			t.Errorf("summaryFits(%d records, %d bytes free) = %v, want %v", tc.records, tc.free, got, tc.fits)
		}
	}
}

// writeRun writes a capture of two processes, one of whose allocations
// were made by a pool for a thread (stitched into that thread's stack),
// in several chunks, and returns its path. With inTurns, the second
// process's records follow all of the first's (as when the agent drains
// one ring, then the other, each full of the whole run).
func writeRun(t *testing.T, inTurns bool, seen *seenCapture) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run.hlc")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := capture.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	if seen != nil {
		w.SetObserver(seen.observer(nil))
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Meta(&capture.Meta{Rate: 1, Command: []string{"./leaky"}}))
	for s := uint32(1); s <= 2; s++ {
		must(w.Process(&capture.Process{Stream: s, PID: int(100 * s), Exe: "/srv/leaky", StartMonoNano: 1000}))
		must(w.Mapping(&capture.Mapping{ID: uint64(s), Stream: s, File: "/srv/leaky", Start: 0x1000, Limit: 0x9000}))
	}
	must(w.Mapping(&capture.Mapping{ID: 3, Stream: 1, File: "/usr/lib/x86_64-linux-gnu/libgomp.so.1", Start: 0x7000_0000, Limit: 0x7001_0000}))
	for id, fn := range []string{"main", "load_cache", "parse"} {
		must(w.Location(&capture.Location{ID: uint64(10 + id), MappingID: 1, Address: uint64(0x1000 + id), Lines: []capture.Line{{Function: fn, File: "leaky.c", Line: 10 * id}}}))
	}
	must(w.Location(&capture.Location{ID: 13, MappingID: 3, Address: 0x7000_0100, Lines: []capture.Line{{Function: "gomp_thread_start"}}}))
	must(w.Stack(&capture.Stack{ID: 20, Locations: []uint64{11, 10}})) // load_cache <- main
	must(w.Stack(&capture.Stack{ID: 21, Locations: []uint64{12, 10}})) // parse <- main
	must(w.Stack(&capture.Stack{ID: 22, Locations: []uint64{13}}))     // a pool worker
	must(w.Origin(&capture.Origin{Stream: 1, Token: 7 << 32, TID: 7, TimeNano: 1500, StackID: 21}))
	tm := int64(2000)
	for i := range 3000 {
		s := uint32(1 + i%2)
		if inTurns {
			s = uint32(1 + i/1500)
			if i == 1500 {
				tm = 2000
			}
		}
		addr := uint64(0x100000 + 64*i)
		a := &capture.Alloc{Stream: s, TID: 7, TimeNano: tm, Addr: addr, Size: uint64(100 + i%7), StackID: 20, Func: capture.FuncMalloc}
		if i%3 == 0 {
			a.StackID, a.TID, a.Origin, a.Method = 22, 8, 7<<32, capture.MethodAPI
		}
		must(w.Alloc(a))
		if i%4 != 0 { // a quarter leak
			must(w.Free(&capture.Free{Stream: s, TID: 7, TimeNano: tm + 1, Addr: addr}))
		}
		tm += 2
		if i%500 == 499 {
			must(w.Malloc(&capture.Malloc{Stream: s, TimeNano: tm, InUse: uint64(i) << 10, Free: uint64(i%1000) << 12}))
			must(w.RSS(&capture.RSS{Stream: s, TimeNano: tm, Bytes: uint64(i) << 12}))
			must(w.Flush()) // a chunk
		}
	}
	must(w.End(&capture.End{Stream: 1, TimeNano: tm}))
	must(w.Close())
	must(f.Close())
	return path
}

// inMemory is the summary of a capture loaded whole, as reports replay it.
func inMemory(t *testing.T, path string) string {
	t.Helper()
	c, err := capture.Load(path)
	if c == nil {
		t.Fatal(err)
	}
	stack.Stitch(c)
	var b strings.Builder
	if err := export.Summary(&b, c, heap.NewReplay(c, heap.Options{}).Summary(), export.SummaryOptions{Status: "exited with status 0", Capture: path}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The summary of a run streams its capture and says what a report of the
// whole capture would, pool work stitched to its origin: read once with
// what was seen written, twice without; also of a capture whose
// processes' records came in turns (replayed from memory), of a capture
// cut short (whose damage it then reports), and of one cut short after
// it was seen whole (as when a write failed).
func TestSummaryStreamsCapture(t *testing.T) {
	for _, inTurns := range []bool{false, true} {
		for _, watched := range []bool{false, true} {
			var seen *seenCapture
			if watched {
				seen = newSeenCapture()
			}
			path := writeRun(t, inTurns, seen)
			var got strings.Builder
			if err := printSummary(&got, path, "exited with status 0", nil, seen); err != nil {
				t.Fatal(err)
			}
			if want := inMemory(t, path); got.String() != want {
				t.Errorf("in turns %v, seen %v: summary:\n%s\nsummary from memory:\n%s", inTurns, watched, got.String(), want)
			}
			if !strings.Contains(got.String(), "parse (leaky.c:20) via gomp_thread_start") {
				t.Errorf("the pool's allocations are not charged to parse, their origin:\n%s", got.String())
			}
		}
	}

	for _, watched := range []bool{false, true} {
		var seen *seenCapture
		if watched {
			seen = newSeenCapture()
		}
		path := writeRun(t, false, seen)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data[:len(data)*2/3], 0o600); err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		err = printSummary(&got, path, "exited with status 0", nil, seen)
		var corrupt *capture.CorruptError
		if !errors.As(err, &corrupt) {
			t.Fatalf("seen %v: summary of a capture cut short: error %v, want a CorruptError", watched, err)
		}
		if want := inMemory(t, path); got.String() != want || !strings.Contains(want, "samples") {
			t.Errorf("seen %v: summary of a capture cut short:\n%s\nsummary from memory:\n%s", watched, got.String(), want)
		}
	}
}
