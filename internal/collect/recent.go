package collect

import "github.com/heaplens/heaplens/internal/stack"

// recentRuns is how many of a stream's latest stack parts (native, Python)
// the next one looks for shared outer frames in: STACK records do not say
// their thread, and the threads of a pool interleave theirs.
const recentRuns = 4

// run is one stack part: its frames as the library wrote them, their
// Locations and, for a native part, what each is to the interpreter.
type run[F comparable] struct {
	frames  []F
	ids     []uint64
	classes []stack.Class
}

// recent holds a stream's latest runs of one kind; spare is where the
// next one is built.
type recent[F comparable] struct {
	runs  [recentRuns]run[F]
	next  int // the oldest
	spare run[F]
}

// mostShared returns the latest run that shares the most outermost frames
// with frames, and how many it shares. With knownOnly, a frame whose
// Location is 0 (a Python frame of code not received yet) is not shared.
func (r *recent[F]) mostShared(frames []F, knownOnly bool) (*run[F], int) {
	best, same := 0, 0
	for j := range recentRuns { // the latest first
		i := (r.next + recentRuns - 1 - j) % recentRuns
		p := &r.runs[i]
		// One that shares no more than the best so far differs at its depth.
		if !p.shares(frames, same, knownOnly) {
			continue
		}
		k := 0
		for p.shares(frames, k, knownOnly) {
			k++
		}
		if k > same {
			best, same = i, k
		}
	}
	return &r.runs[best], same
}

// shares reports whether p's k-th frame from the outermost is frames' too.
func (p *run[F]) shares(frames []F, k int, knownOnly bool) bool {
	n, m := len(frames), len(p.frames)
	return k < n && k < m && frames[n-1-k] == p.frames[m-1-k] && (!knownOnly || p.ids[m-1-k] != 0)
}

// push makes the spare the newest run, in place of the oldest, which
// becomes the spare.
func (r *recent[F]) push() {
	r.runs[r.next], r.spare = r.spare, r.runs[r.next]
	r.next = (r.next + 1) % recentRuns
}

// latest returns the newest run.
func (r *recent[F]) latest() *run[F] { return &r.runs[(r.next+recentRuns-1)%recentRuns] }
