// Package heap turns the sampled allocations and frees of a capture into
// heap profiles (views) with unbiased estimates of bytes and objects.
//
// The sampler marks each allocated byte with probability 1/Rate, so an
// allocation of s bytes is sampled with probability 1-(1-1/Rate)^s. Each
// sample is weighted by the inverse of that probability (Horvitz–Thompson),
// and weighted samples are summed: unbiasing a sum of sizes instead would be
// wrong because the probability depends on each allocation's own size.
package heap

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
)

// Weight returns how many allocations a sampled allocation of size bytes
// stands for at the given sampling rate: 1/(1-(1-1/rate)^size). At rate 1
// (or 0, a capture without Meta) every allocation is sampled and the weight
// is 1. A zero-size allocation can only be sampled at rate 1 and weighs 1.
func Weight(size, rate uint64) float64 {
	w := weigher{rate: rate}
	if rate > 1 {
		w.log1mp = math.Log1p(-1 / float64(rate))
	}
	return w.compute(size)
}

// weigher is Weight at one rate, with the logarithm of the rate computed
// once and the weights of recent sizes kept: the views weigh every
// allocation of a capture, millions of them, of a few sizes that repeat.
type weigher struct {
	rate   uint64
	log1mp float64 // log1p(-1/rate): log of the chance a byte is not sampled
	memo   *[weightMemo]sizeWeight
}

// weightMemo is the number of sizes a weigher keeps, by size modulo it.
const weightMemo = 512

type sizeWeight struct {
	size uint64 // 0: none (size 0 weighs 1 without a lookup)
	w    float64
}

func newWeigher(rate uint64) weigher {
	w := weigher{rate: rate}
	if rate > 1 {
		w.log1mp = math.Log1p(-1 / float64(rate))
		w.memo = new([weightMemo]sizeWeight)
	}
	return w
}

func (w weigher) weight(size uint64) float64 {
	if w.memo == nil || size == 0 {
		return 1
	}
	m := &w.memo[size%weightMemo]
	if m.size != size {
		*m = sizeWeight{size, w.compute(size)}
	}
	return m.w
}

func (w weigher) compute(size uint64) float64 {
	if w.rate <= 1 || size == 0 {
		return 1
	}
	// -expm1(size*log1p(-1/rate)) is the sampling probability, computed
	// without the cancellation of 1-(1-1/rate)^size for small sizes.
	return -1 / math.Expm1(float64(size)*w.log1mp)
}

// Options select what a view covers. It is a struct so filters can be added
// without changing callers.
//
// Streams chooses which heap is replayed: the peak of one process
// is the peak of its streams only. Thread and KeepStack only choose which
// samples of the result are kept: the live set at the peak of the process,
// restricted to one thread's allocations, is still taken at the process's
// peak, not at the peak of that thread's allocations.
type Options struct {
	Streams []uint32 // only these streams (e.g. every image of one pid); nil = no restriction

	Thread    uint32                    // only allocations made by this thread id; 0 = all
	Kind      string                    // only this kind of memory (capture.MemKinds); "" = all
	KeepStack func(stackID uint64) bool // only these stacks (a frame filter); nil = all
	ByThread  bool                      // one Sample per (stream, stack, thread) instead of (stream, stack)

	// MinAge, for Leaks: only blocks allocated at least MinAge before their
	// stream's last record (servers that never exit cleanly).
	MinAge time.Duration
}

func (o Options) keep(stream uint32) bool {
	return o.Streams == nil || slices.Contains(o.Streams, stream)
}

// keepSample reports whether an allocation of a covered stream belongs in
// the result.
func (o Options) keepSample(a *capture.Alloc) bool {
	if o.Thread != 0 && a.TID != o.Thread {
		return false
	}
	if o.Kind != "" && capture.MemKind(a.Func) != o.Kind {
		return false
	}
	return o.KeepStack == nil || o.KeepStack(a.StackID)
}

// Sample is the estimate for one call stack of one stream.
type Sample struct {
	Stream  uint32
	StackID uint64
	Bytes   float64 // estimated bytes
	Objects float64 // estimated allocations
	Count   int     // raw samples behind the estimate
	TID     uint32  // the allocating thread with Options.ByThread, else 0
	// Var is the estimated variance of Bytes, from the samples themselves
	// (see CI95); 0 at rate 1, where Bytes is exact.
	Var float64
	// Func is the hooked function every sample here went through
	// (capture.FuncMalloc, …), or FuncMixed.
	Func uint8
}

// DropStats is what a stream lost, from its End record.
type DropStats struct {
	DroppedAllocs uint64 // alloc records the ring had no room for
	DroppedFrees  uint64 // free records the ring had no room for
	LostBytes     uint64 // ring bytes reserved but never committed
}

// Total returns the number of dropped records plus lost bytes, zero when
// nothing was lost.
func (d DropStats) Total() uint64 { return d.DroppedAllocs + d.DroppedFrees + d.LostBytes }

// Profile is one view of a capture.
type Profile struct {
	View    string   // "allocs", "leaks", …
	Rate    uint64   // the capture's sampling rate
	Streams []uint32 // the Options.Streams filter, nil = all
	Samples []Sample // sorted by Bytes descending, then StackID, then Stream

	TotalBytes, TotalObjects float64
	TotalVar                 float64 // estimated variance of TotalBytes

	// Drops holds the End record losses of each stream covered. A stream
	// without an End record (the agent stopped first) is absent.
	Drops map[uint32]DropStats

	// UnmatchedFrees counts frees of addresses that were not live: their
	// allocation was dropped, or happened before the library loaded.
	UnmatchedFrees int
	// LostFrees counts allocations at an address that was still live, which
	// means the free in between was lost; the older allocation is dropped
	// from the live set rather than reported as a leak.
	LostFrees int

	// At is, for the live and peak views, the CLOCK_MONOTONIC time of the
	// snapshot; 0 for the other views. Start is the capture's first time
	// (see Start), so At-Start is the time into the run.
	At, Start int64
	// HeapAt is the estimated heap of the covered streams at At, before
	// the thread and stack filters; for peak, the peak itself.
	HeapAt float64
	// Lifetime is the bound of the temporary view.
	Lifetime time.Duration
}

// Dropped reports whether any covered stream lost records.
func (p *Profile) Dropped() bool {
	for _, d := range p.Drops {
		if d.Total() > 0 {
			return true
		}
	}
	return false
}

// RawSamples returns the number of raw samples behind the profile.
func (p *Profile) RawSamples() int {
	n := 0
	for _, s := range p.Samples {
		n += s.Count
	}
	return n
}

type key struct {
	stream uint32
	stack  uint64
	tid    uint32
}

// builder accumulates weighted samples per (stream, stack), or per (stream,
// stack, thread), of the allocations the options keep.
type builder struct {
	w     weigher
	opt   Options
	sites map[key]*Sample
}

func newBuilder(c *capture.Capture, opt Options) *builder {
	return &builder{w: newWeigher(c.Meta.Rate), opt: opt, sites: make(map[key]*Sample)}
}

func (b *builder) add(a *capture.Alloc) {
	if !b.opt.keepSample(a) {
		return
	}
	k := key{a.Stream, a.StackID, 0}
	if b.opt.ByThread {
		k.tid = a.TID
	}
	s := b.sites[k]
	if s == nil {
		s = &Sample{Stream: a.Stream, StackID: a.StackID, TID: k.tid}
		b.sites[k] = s
	}
	s.Add(a, b.w.weight(a.Size), 1)
}

// Add adds (sign 1) or takes away (sign −1) one sampled allocation that
// stands for w allocations (Weight), as every view sums them. A sample
// that gets allocations of several hooked functions has Func FuncMixed.
func (s *Sample) Add(a *capture.Alloc, w, sign float64) {
	sz := float64(a.Size)
	s.Objects += sign * w
	s.Bytes += sign * w * sz
	// Horvitz–Thompson for independent (Poisson) inclusion with probability
	// p = 1/w: each sample adds s²(1−p)/p² = s²·w·(w−1) to the estimated
	// variance, and samples of different allocations are independent.
	s.Var += sign * sz * sz * w * (w - 1)
	if sign > 0 {
		if s.Count == 0 {
			s.Func = a.Func
		} else if s.Func != a.Func {
			s.Func = FuncMixed
		}
	}
	s.Count += int(sign)
}

// profile returns the view's Profile; start is Start(c).
func (b *builder) profile(view string, c *capture.Capture, opt Options, start int64) *Profile {
	p := &Profile{View: view, Rate: c.Meta.Rate, Drops: make(map[uint32]DropStats), Start: start, Streams: opt.Streams}
	p.Samples = make([]Sample, 0, len(b.sites))
	for _, s := range b.sites {
		p.Samples = append(p.Samples, *s)
	}
	slices.SortFunc(p.Samples, func(x, y Sample) int {
		if c := cmp.Compare(y.Bytes, x.Bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(x.StackID, y.StackID); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Stream, y.Stream); c != 0 {
			return c
		}
		return cmp.Compare(x.TID, y.TID)
	})
	// Sum in sorted order so totals do not depend on map iteration order.
	for _, s := range p.Samples {
		p.TotalBytes += s.Bytes
		p.TotalObjects += s.Objects
		p.TotalVar += s.Var
	}
	for stream, e := range c.Ends {
		if opt.keep(stream) {
			p.Drops[stream] = DropStats{DroppedAllocs: e.DroppedAllocs, DroppedFrees: e.DroppedFrees, LostBytes: e.LostBytes}
		}
	}
	return p
}

// Allocs is the "allocs" view: everything allocated during the run, per
// stream and stack, whether or not it was freed.
func Allocs(c *capture.Capture, opt Options) *Profile {
	b := newBuilder(c, opt)
	for i := range c.Allocs {
		if a := &c.Allocs[i]; opt.keep(a.Stream) {
			b.add(a)
		}
	}
	return b.profile("allocs", c, opt, Start(c))
}

// Leaks is the "leaks" view: per stream, the sampled allocations still live
// when the stream's records end (at exit, at exec, or at death). With
// Options.MinAge, only those allocated at least MinAge before the stream's
// last record (its End record or its last event, whichever is later).
//
// Allocs and Frees are replayed in time order, each stream with its own
// live set of addresses. A free of an address that is not live is counted in
// UnmatchedFrees and ignored. An allocation at an address that is already
// live replaces the older one and counts in LostFrees: the allocator cannot
// hand out a live address, so the older block's free was lost.
func Leaks(c *capture.Capture, opt Options) *Profile {
	return NewReplay(c, opt).Leaks(opt)
}

// FuncMixed is Sample.Func when its samples came through different hooked
// functions.
const FuncMixed = 255

// CI95 returns the half-width of a 95 % interval for an estimate of bytes
// whose estimated variance is v (normal approximation): the estimate ±
// CI95(v). It is 0 at rate 1, where estimates are exact.
func CI95(v float64) float64 { return 1.96 * math.Sqrt(max(v, 0)) }

// Variance returns the variance of the Horvitz–Thompson estimate of the
// bytes of a site whose true allocations are sizes (size → count), sampled
// per byte by a Poisson process with mean period rate:
// Σ count·s²·(1−p)/p with p = 1−e^(−s/rate). Tests use it to derive
// tolerances for estimated bytes.
func Variance(sizes map[uint64]int, rate uint64) float64 {
	if rate <= 1 {
		return 0
	}
	var v float64
	for s, n := range sizes {
		if s == 0 {
			continue
		}
		p := -math.Expm1(-float64(s) / float64(rate))
		fs := float64(s)
		v += float64(n) * fs * fs * (1 - p) / p
	}
	return v
}

// Stddev returns the standard deviation of the estimated bytes of a site:
// the square root of Variance.
func Stddev(sizes map[uint64]int, rate uint64) float64 {
	return math.Sqrt(Variance(sizes, rate))
}

// Covers reports whether the profile covers a stream (its stream filters).
func (p *Profile) Covers(stream uint32) bool {
	return Options{Streams: p.Streams}.keep(stream)
}
