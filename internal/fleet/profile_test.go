package fleet

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// writeCapture writes a capture of two processes through a Writer that p
// observes, and returns the file. Stream 1 (pid 100) has a main thread
// (stack 1: submit ← main) that keeps and frees blocks, and a pool worker
// (stack 2: work ← worker_main ← start_thread) whose allocations are made
// for the main thread; the Origin record comes after the first of them, as
// it can when the worker's ring is read first. Stream 2 (pid 200) ends with
// a block still live.
func writeCapture(t *testing.T, rate uint64, p *Profile) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.SetObserver(p)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Meta(&capture.Meta{FormatVersion: capture.Version, Rate: rate, StartUnixNano: 1, Command: []string{"app"}}))
	must(w.Process(&capture.Process{Stream: 1, PID: 100, Exe: "/usr/bin/app"}))
	must(w.Process(&capture.Process{Stream: 2, PID: 200, Exe: "/usr/bin/helper"}))
	files := map[uint64]string{1: "/usr/lib/x86_64-linux-gnu/libc.so.6", 2: "/opt/lib/libpool.so.3", 3: "/usr/bin/app"}
	for id, f := range files {
		must(w.Mapping(&capture.Mapping{ID: id, Stream: 1, File: f, Start: id << 20, Limit: id<<20 + 1<<20}))
	}
	fns := map[uint64]string{10: "main", 11: "submit", 20: "work", 21: "worker_main", 22: "start_thread"}
	maps := map[uint64]uint64{10: 3, 11: 3, 20: 2, 21: 2, 22: 1}
	for _, id := range []uint64{10, 11, 20, 21, 22} {
		must(w.Location(&capture.Location{ID: id, MappingID: maps[id], Address: maps[id]<<20 + id, Lines: []capture.Line{{Function: fns[id]}}}))
	}
	must(w.Stack(&capture.Stack{ID: 1, Locations: []uint64{11, 10}}))
	must(w.Stack(&capture.Stack{ID: 2, Locations: []uint64{20, 21, 22}}))
	const token = 1<<32 | 5
	addr := uint64(0x10000)
	alloc := func(stream uint32, st, size uint64, pool bool) uint64 {
		addr += 0x1000
		a := &capture.Alloc{Stream: stream, TID: 5, Addr: addr, Size: size, StackID: st, Func: capture.FuncMalloc}
		if pool {
			a.Origin, a.Method = token, capture.MethodOpenMP
		}
		must(w.Alloc(a))
		return addr
	}
	for i := uint64(0); i < 200; i++ {
		kept := alloc(1, 1, 1000+37*i, false)
		freed := alloc(1, 1, 300+11*i, false)
		must(w.Free(&capture.Free{Stream: 1, Addr: freed}))
		alloc(1, 2, 5000+i, true)
		if i == 0 {
			must(w.Origin(&capture.Origin{Stream: 1, Token: token, TID: 5, StackID: 1}))
		}
		if i%2 == 0 {
			must(w.Free(&capture.Free{Stream: 1, Addr: kept}))
		}
		alloc(2, 1, 64*i, false)
	}
	must(w.End(&capture.End{Stream: 2}))
	must(w.Close())
	return buf.Bytes()
}

// byStack keys a profile's samples by process and stack shape, which
// stays the same however the stitched stacks are numbered.
func byStack(c *capture.Capture, p *heap.Profile) map[string]heap.Sample {
	out := map[string]heap.Sample{}
	for _, s := range p.Samples {
		var fns []string
		for _, id := range c.Stacks[s.StackID].Locations {
			fns = append(fns, c.Locations[id].Lines[0].Function)
		}
		out[string(rune('0'+s.Stream))+":"+strings.Join(fns, ";")] = s
	}
	return out
}

// TestProfileMatchesViews feeds a Profile the records of a capture as they
// are written and checks that it holds what the report's views compute from
// the file: the allocs view, and the leaks view of a process still running.
func TestProfileMatchesViews(t *testing.T) {
	for _, rate := range []uint64{1, 4096} {
		p := New()
		file := writeCapture(t, rate, p)
		c, err := capture.ReadAll(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		stack.Stitch(c)
		snap := p.Snapshot(0)
		if p.Pending() != 0 {
			t.Errorf("rate %d: %d pool allocations still wait for their origin", rate, p.Pending())
		}
		want, got := byStack(c, heap.Allocs(c, heap.Options{})), byStack(snap.Capture, snap.Alloc)
		leaks := byStack(c, heap.Leaks(c, heap.Options{Streams: []uint32{1}}))
		inuse := byStack(snap.Capture, snap.Inuse)
		if len(got) != len(want) || len(got) != 3 {
			t.Errorf("rate %d: %d alloc sites, the allocs view has %d (want 3): %v", rate, len(got), len(want), got)
		}
		for k, w := range want {
			g := got[k]
			if g.Count != w.Count || !near(g.Bytes, w.Bytes) || !near(g.Objects, w.Objects) || !near(g.Var, w.Var) {
				t.Errorf("rate %d, %s: allocated %+v, the allocs view says %+v", rate, k, g, w)
			}
			l, live := leaks[k], inuse[k]
			if live.Count != l.Count || !near(live.Bytes, l.Bytes) || !near(live.Var, l.Var) {
				t.Errorf("rate %d, %s: live %+v, the leaks view of the running process says %+v", rate, k, live, l)
			}
		}
		pool := got["1:work;worker_main;[pool: libpool (openmp)];submit;main"]
		if rate == 1 && pool.Count != 200 {
			t.Errorf("the pool's allocations are not under the stitched stack: %v", got)
		}
		if rate == 1 && pool.Bytes != 200*5000+199*200/2 {
			t.Errorf("pool bytes %v", pool.Bytes)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b), 1) }

func TestSnapshotPID(t *testing.T) {
	p := New()
	writeCapture(t, 1, p)
	for _, tt := range []struct {
		pid     int
		streams []uint32
	}{{0, []uint32{1, 2}}, {100, []uint32{1}}, {200, []uint32{2}}, {300, nil}} {
		seen := map[uint32]bool{}
		for _, s := range p.Snapshot(tt.pid).Alloc.Samples {
			seen[s.Stream] = true
		}
		if len(seen) != len(tt.streams) {
			t.Errorf("pid %d: streams %v, want %v", tt.pid, seen, tt.streams)
		}
		for _, s := range tt.streams {
			if !seen[s] {
				t.Errorf("pid %d: stream %d missing", tt.pid, s)
			}
		}
	}
}

// A pool allocation whose origin never comes is charged once too many wait,
// so that a lost Origin record cannot hold memory.
func TestPendingBounded(t *testing.T) {
	p := New()
	p.Observe(&capture.Record{Type: capture.RecMeta, Meta: &capture.Meta{Rate: 1}})
	p.Observe(&capture.Record{Type: capture.RecStack, Stack: &capture.Stack{ID: 1, Locations: []uint64{1}}})
	p.Observe(&capture.Record{Type: capture.RecLocation, Location: &capture.Location{ID: 1, Lines: []capture.Line{{Function: "work"}}}})
	for i := 0; i < maxPending+100; i++ {
		p.Observe(&capture.Record{Type: capture.RecAlloc, Alloc: capture.Alloc{Stream: 1, Addr: uint64(i + 1), Size: 8, StackID: 1, Origin: 99, Method: capture.MethodAPI}})
	}
	if n := p.Pending(); n != maxPending {
		t.Errorf("%d pending, want at most %d", n, maxPending)
	}
	if s := p.Snapshot(0).Alloc; s.TotalObjects != 100 {
		t.Errorf("%v allocations charged without their origin, want the 100 oldest", s.TotalObjects)
	}
}
