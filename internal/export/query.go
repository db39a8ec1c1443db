package export

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// Views lists the views a Query can ask for, in the order menus show them.
var Views = []string{"peak", "leaks", "live", "allocs", "temporary", "timeline", "resident"}

// Query is one view of a capture with its filters, as `heaplens report`
// flags and the web UI's URL parameters spell it.
type Query struct {
	View     string        // one of Views
	At       time.Duration // live: time since the capture's start (see heap.Start); AtEnd = the end
	Lifetime time.Duration // temporary: 0 = heap.DefaultLifetime
	MinAge   time.Duration // leaks: only blocks at least this old at the end
	From     time.Duration // with Until > 0: only the window [From, Until] since the start (capture.Window)
	Until    time.Duration
	PID      int    // only this process (all its images); 0 = all
	Thread   uint32 // only this thread's allocations; 0 = all
	Kind     string // only this kind of memory (capture.MemKinds); "" = all
	Focus    string // keep stacks with a frame matching this regexp
	Hide     string // drop frames matching this regexp from stacks
	ByThread bool   // one sample per thread (pprof labels)
}

// AtEnd, as Query.At, asks the live view for the end of the run: the last
// recorded allocation or free.
const AtEnd time.Duration = -1

// Result is a computed Query.
type Result struct {
	Capture *capture.Capture  // the capture, with hidden frames removed
	Profile *heap.Profile     // the view; for timeline, the live set at the peak
	Filter  map[string]string // the filters given, for headers

	cc  *capture.Capture // Capture within the window, if any
	opt heap.Options

	// The replay, the timeline and the allocs view are computed when first
	// asked for: the text of most views needs neither of the last two, and
	// the allocs view no replay.
	replay *heap.Replay
	allocs *heap.Profile
}

// Replay returns the replay of the result's streams.
func (r *Result) Replay() *heap.Replay {
	if r.replay == nil {
		r.replay = heap.NewReplay(r.cc, r.opt)
	}
	return r.replay
}

// Timeline returns the timeline of the result's streams.
func (r *Result) Timeline() *heap.Timeline { return r.Replay().Timeline() }

// Allocs returns the allocs view with the result's filters (pprof's
// alloc_* values).
func (r *Result) Allocs() *heap.Profile {
	if r.allocs == nil {
		r.allocs = heap.Allocs(r.cc, r.opt)
	}
	return r.allocs
}

// Compute runs q on c. It fails on an unknown view, a bad regexp, or a pid
// the capture does not hold.
func (q Query) Compute(c *capture.Capture) (*Result, error) {
	r := &Result{Capture: c, Filter: map[string]string{}}
	opt := heap.Options{ByThread: q.ByThread, MinAge: q.MinAge, Thread: q.Thread, Kind: q.Kind}
	if q.Hide != "" {
		re, err := regexp.Compile(q.Hide)
		if err != nil {
			return nil, fmt.Errorf("--hide: %w", err)
		}
		r.Capture = HideFrames(c, re)
		r.Filter["hide"] = q.Hide
	}
	if q.Focus != "" {
		re, err := regexp.Compile(q.Focus)
		if err != nil {
			return nil, fmt.Errorf("--focus: %w", err)
		}
		opt.KeepStack = FocusStacks(r.Capture, re)
		r.Filter["focus"] = q.Focus
	}
	if q.PID != 0 {
		opt.Streams = c.StreamsOf(q.PID)
		if len(opt.Streams) == 0 {
			return nil, fmt.Errorf("no process with pid %d in the capture", q.PID)
		}
		r.Filter["pid"] = strconv.Itoa(q.PID)
	}
	if q.Thread != 0 {
		r.Filter["thread"] = strconv.FormatUint(uint64(q.Thread), 10)
	}
	if q.Kind != "" {
		r.Filter["kind"] = q.Kind
	}
	if q.MinAge > 0 {
		r.Filter["min_age"] = q.MinAge.String()
	}
	cc := r.Capture
	if q.Until > 0 {
		start := heap.Start(cc)
		cc = cc.Window(start+int64(q.From), start+int64(q.Until))
		r.Filter["window"] = q.From.String() + "," + q.Until.String()
	}
	r.cc, r.opt = cc, opt
	switch q.View {
	case "allocs":
		r.Profile = r.Allocs()
	case "leaks":
		r.Profile = r.Replay().Leaks(opt)
	case "live":
		at := r.Replay().Start() + int64(q.At)
		if q.At < 0 {
			at = heap.LastEvent(cc)
		}
		r.Profile = r.Replay().Live(opt, at)
	case "peak":
		r.Profile = r.Replay().Peak(opt)
	case "temporary":
		r.Profile = r.Replay().Temporary(opt, q.Lifetime)
	case "resident":
		r.Profile = r.Replay().Resident(opt)
	case "timeline":
		r.Profile = r.Replay().Peak(opt)
		r.Profile.View = "timeline"
	default:
		return nil, fmt.Errorf("unknown view %q (one of %v)", q.View, Views)
	}
	return r, nil
}

// Doc is the JSON document of the result.
func (r *Result) Doc() *Doc {
	return BuildDoc(r.Capture, r.Profile, DocOptions{Timeline: r.Timeline(), Filter: r.Filter})
}
