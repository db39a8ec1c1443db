package export

import (
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

func TestHelpers(t *testing.T) {
	const ms = int64(1e6)
	procs := []*capture.Process{
		{Stream: 1, PID: 10, StartMonoNano: 0, Exe: "/usr/bin/bash"},             // the shim: exec'd
		{Stream: 2, PID: 11, StartMonoNano: 5 * ms, Exe: "/usr/bin/readlink"},    // a helper that ended fast
		{Stream: 3, PID: 12, StartMonoNano: 6 * ms, Exe: "/usr/bin/bash"},        // a shell that ran long
		{Stream: 4, PID: 13, StartMonoNano: 7 * ms, Exe: "/usr/bin/sort"},        // short, but allocated much
		{Stream: 5, PID: 10, StartMonoNano: 20 * ms, Exe: "/usr/bin/python3.11"}, // the program
		{Stream: 6, PID: 14, StartMonoNano: 30 * ms, Exe: "/usr/bin/python3.11"}, // its worker, short and small
		{Stream: 7, PID: 15, StartMonoNano: 40 * ms, Exe: "/usr/bin/env"},        // its end not recorded
	}
	ends := map[uint32]*capture.End{
		1: {Stream: 1, TimeNano: 19 * ms, Exec: true},
		2: {Stream: 2, TimeNano: 9 * ms},
		3: {Stream: 3, TimeNano: 6*ms + 3e9},
		4: {Stream: 4, TimeNano: 50 * ms},
		5: {Stream: 5, TimeNano: 100 * ms},
		6: {Stream: 6, TimeNano: 60 * ms},
	}
	allocated := map[uint32]float64{1: 100 << 10, 2: 10 << 10, 3: 1 << 20, 4: 64 << 20, 5: 1 << 10, 6: 1 << 10, 7: 0}
	c := capture.NewCapture()
	c.Processes = procs
	for s, e := range ends {
		c.Ends[s] = e
	}
	got := helpersBy(c, commandPID(c), allocated)
	for _, tt := range []struct {
		stream uint32
		helper bool
	}{{1, true}, {2, true}, {3, false}, {4, false}, {5, false}, {6, false}, {7, false}} {
		if got[tt.stream] != tt.helper {
			t.Errorf("stream %d (%s): helper %v, want %v", tt.stream, procs[tt.stream-1].Exe, got[tt.stream], tt.helper)
		}
	}
	// A single short process is the program, not a helper.
	one := capture.NewCapture()
	one.Processes = procs[1:2]
	one.Ends[2] = ends[2]
	if h := helpersBy(one, commandPID(one), allocated); len(h) != 0 {
		t.Errorf("the only process folded as a helper: %v", h)
	}
}
