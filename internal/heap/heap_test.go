package heap

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

func TestWeight(t *testing.T) {
	tests := []struct {
		size, rate uint64
		want       float64
	}{
		{100, 1, 1},
		{0, 1, 1},
		{0, 4096, 1},
		{100, 0, 1}, // no Meta: treat as rate 1
		// Rate 2: p = 1-(1/2)^s.
		{1, 2, 2},
		{2, 2, 4.0 / 3},
		{3, 2, 8.0 / 7},
		// Rate 4: p = 1-(3/4)^s.
		{1, 4, 4},
		{2, 4, 16.0 / 7},
		// Huge allocations are always sampled.
		{1 << 40, 4096, 1},
	}
	for _, tt := range tests {
		if got := Weight(tt.size, tt.rate); math.Abs(got-tt.want) > 1e-12*tt.want {
			t.Errorf("Weight(%d, %d) = %v, want %v", tt.size, tt.rate, got, tt.want)
		}
	}
	// Rate 4096 against the direct formula, where it is still accurate.
	for _, s := range []uint64{1, 16, 1024, 4096, 65536, 0} {
		want := 1 / (1 - math.Pow(1-1.0/4096, float64(s)))
		if got := Weight(s, 4096); math.Abs(got-want) > 1e-9*want {
			t.Errorf("Weight(%d, 4096) = %v, want %v", s, got, want)
		}
	}
	// Small sizes: w ≈ R/s; the stable form must not lose precision.
	if got, want := Weight(1, 1<<30), float64(1<<30); math.Abs(got-want) > 1 {
		t.Errorf("Weight(1, 1<<30) = %v, want ≈ %v", got, want)
	}
}

// synth builds a capture with one process per stream and the given records.
func synth(rate uint64, allocs []capture.Alloc, frees []capture.Free, order []int32) *capture.Capture {
	c := capture.NewCapture()
	c.Meta.Rate = rate
	c.Processes = []*capture.Process{{Stream: 1, PID: 100}, {Stream: 2, PID: 200}}
	c.Allocs = allocs
	c.Frees = frees
	c.FreeOrder = order
	return c
}

func alloc(stream uint32, time int64, addr, size, stack uint64) capture.Alloc {
	return capture.Alloc{Stream: stream, TID: 1, TimeNano: time, Addr: addr, Size: size, StackID: stack, Func: capture.FuncMalloc}
}

func free(stream uint32, time int64, addr uint64) capture.Free {
	return capture.Free{Stream: stream, TID: 1, TimeNano: time, Addr: addr}
}

func TestAllocs(t *testing.T) {
	allocs := []capture.Alloc{
		alloc(1, 1, 0x10, 100, 7),
		alloc(1, 2, 0x20, 300, 8),
		alloc(1, 3, 0x30, 50, 7),
		alloc(2, 1, 0x10, 1000, 7),
		alloc(2, 2, 0x10, 1, 9),
	}
	frees := []capture.Free{free(1, 4, 0x10)} // frees do not matter for allocs
	tests := []struct {
		name        string
		rate        uint64
		opt         Options
		want        []Sample
		bytes, objs float64
	}{
		{"rate 1", 1, Options{}, []Sample{
			{2, 7, 1000, 1, 1, 0, 0, capture.FuncMalloc}, {1, 8, 300, 1, 1, 0, 0, capture.FuncMalloc}, {1, 7, 150, 2, 2, 0, 0, capture.FuncMalloc}, {2, 9, 1, 1, 1, 0, 0, capture.FuncMalloc},
		}, 1451, 5},
		{"rate 1 stream 1", 1, Options{Streams: []uint32{1}}, []Sample{
			{1, 8, 300, 1, 1, 0, 0, capture.FuncMalloc}, {1, 7, 150, 2, 2, 0, 0, capture.FuncMalloc},
		}, 450, 3},
		// Rate 2: weights 1/(1-2^-s); s=1 → 2, others ≈ 1.
		{"rate 2 stream 2", 2, Options{Streams: []uint32{2}}, []Sample{
			{2, 7, 1000, 1, 1, 0, 0, capture.FuncMalloc}, {2, 9, 2, 2, 1, 0, 0, capture.FuncMalloc},
		}, 1002, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Allocs(synth(tt.rate, allocs, frees, nil), tt.opt)
			checkProfile(t, p, tt.want, tt.bytes, tt.objs)
		})
	}
}

func checkProfile(t *testing.T, p *Profile, want []Sample, bytes, objs float64) {
	t.Helper()
	if len(p.Samples) != len(want) {
		t.Fatalf("samples = %+v, want %+v", p.Samples, want)
	}
	for i, s := range p.Samples {
		w := want[i]
		if s.Stream != w.Stream || s.StackID != w.StackID || s.Count != w.Count ||
			!near(s.Bytes, w.Bytes) || !near(s.Objects, w.Objects) {
			t.Errorf("sample %d = %+v, want %+v", i, s, w)
		}
	}
	if !near(p.TotalBytes, bytes) || !near(p.TotalObjects, objs) {
		t.Errorf("totals = %v bytes, %v objects; want %v, %v", p.TotalBytes, p.TotalObjects, bytes, objs)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestLeaks(t *testing.T) {
	tests := []struct {
		name      string
		allocs    []capture.Alloc
		frees     []capture.Free
		order     []int32
		opt       Options
		want      []Sample
		bytes     float64
		unmatched int
		lost      int
	}{
		{
			name:   "freed and live",
			allocs: []capture.Alloc{alloc(1, 1, 0xa, 10, 1), alloc(1, 2, 0xb, 20, 2), alloc(1, 3, 0xc, 40, 2)},
			frees:  []capture.Free{free(1, 5, 0xb)},
			order:  []int32{3},
			want:   []Sample{{1, 2, 40, 1, 1, 0, 0, capture.FuncMalloc}, {1, 1, 10, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:  50,
		},
		{
			// realloc in place: free(old) and alloc(new) at the same address
			// and the same time, in that file order: the new block is live.
			name:   "realloc same address same time",
			allocs: []capture.Alloc{alloc(1, 1, 0xa, 10, 1), alloc(1, 5, 0xa, 99, 3)},
			frees:  []capture.Free{free(1, 5, 0xa)},
			order:  []int32{1},
			want:   []Sample{{1, 3, 99, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:  99,
		},
		{
			name:   "realloc tie without FreeOrder: free first",
			allocs: []capture.Alloc{alloc(1, 1, 0xa, 10, 1), alloc(1, 5, 0xa, 99, 3)},
			frees:  []capture.Free{free(1, 5, 0xa)},
			want:   []Sample{{1, 3, 99, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:  99,
		},
		{
			// Same time, file order alloc then free: the free releases it.
			name:   "tie in file order alloc then free",
			allocs: []capture.Alloc{alloc(1, 5, 0xa, 10, 1)},
			frees:  []capture.Free{free(1, 5, 0xa)},
			order:  []int32{1},
			want:   []Sample{},
			bytes:  0,
		},
		{
			// Records drained out of time order are replayed in time order.
			name:   "out of order in file",
			allocs: []capture.Alloc{alloc(1, 10, 0xa, 10, 1), alloc(1, 1, 0xa, 20, 2)},
			frees:  []capture.Free{free(1, 5, 0xa)},
			order:  []int32{0},
			want:   []Sample{{1, 1, 10, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:  10,
		},
		{
			name:      "unmatched free and lost free",
			allocs:    []capture.Alloc{alloc(1, 1, 0xa, 10, 1), alloc(1, 2, 0xa, 30, 2)},
			frees:     []capture.Free{free(1, 0, 0xdead), free(1, 3, 0xbeef)},
			order:     []int32{0, 2},
			want:      []Sample{{1, 2, 30, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:     30,
			unmatched: 2,
			lost:      1,
		},
		{
			// Streams are separate address spaces.
			name:   "streams",
			allocs: []capture.Alloc{alloc(1, 1, 0xa, 10, 1), alloc(2, 1, 0xa, 20, 1)},
			frees:  []capture.Free{free(2, 2, 0xa)},
			order:  []int32{2},
			want:   []Sample{{1, 1, 10, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:  10,
		},
		{
			name:      "stream filter",
			allocs:    []capture.Alloc{alloc(1, 1, 0xa, 10, 1), alloc(2, 1, 0xa, 20, 1)},
			frees:     []capture.Free{free(1, 2, 0xb)},
			order:     []int32{2},
			opt:       Options{Streams: []uint32{2}},
			want:      []Sample{{2, 1, 20, 1, 1, 0, 0, capture.FuncMalloc}},
			bytes:     20,
			unmatched: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Leaks(synth(1, tt.allocs, tt.frees, tt.order), tt.opt)
			if p.View != "leaks" {
				t.Errorf("View = %q", p.View)
			}
			checkProfile(t, p, tt.want, tt.bytes, float64(len(tt.want)))
			if p.UnmatchedFrees != tt.unmatched || p.LostFrees != tt.lost {
				t.Errorf("unmatched %d, lost %d; want %d, %d", p.UnmatchedFrees, p.LostFrees, tt.unmatched, tt.lost)
			}
		})
	}
}

func TestDrops(t *testing.T) {
	c := synth(1, nil, nil, nil)
	c.Ends[1] = &capture.End{Stream: 1, DroppedAllocs: 3, DroppedFrees: 2, LostBytes: 64}
	c.Ends[2] = &capture.End{Stream: 2}
	p := Leaks(c, Options{})
	if !p.Dropped() || p.Drops[1] != (DropStats{3, 2, 64}) || p.Drops[2] != (DropStats{}) {
		t.Errorf("Drops = %+v", p.Drops)
	}
	p = Allocs(c, Options{Streams: []uint32{2}})
	if p.Dropped() || len(p.Drops) != 1 {
		t.Errorf("stream 2 Drops = %+v", p.Drops)
	}
}

func TestSortDeterministic(t *testing.T) {
	var allocs []capture.Alloc
	for i := range 50 {
		allocs = append(allocs, alloc(uint32(1+i%2), int64(i), uint64(i), 8, uint64(50-i%10)))
	}
	a := Allocs(synth(1, allocs, nil, nil), Options{})
	for range 10 {
		b := Allocs(synth(1, allocs, nil, nil), Options{})
		for i := range a.Samples {
			if a.Samples[i] != b.Samples[i] {
				t.Fatalf("order differs at %d: %+v vs %+v", i, a.Samples[i], b.Samples[i])
			}
		}
	}
	for i := 1; i < len(a.Samples); i++ {
		x, y := a.Samples[i-1], a.Samples[i]
		if x.Bytes < y.Bytes || (x.Bytes == y.Bytes && x.StackID > y.StackID) {
			t.Fatalf("not sorted at %d: %+v then %+v", i, x, y)
		}
	}
}

// sampler simulates libheaplens's per-thread Poisson sampler: each thread
// counts bytes down from an exponential gap of mean rate; the allocation
// that crosses zero is sampled and the next gap starts at its end.
type sampler struct {
	rng       *rand.Rand
	rate      float64
	countdown []float64
}

func newSampler(seed uint64, rate uint64, threads int) *sampler {
	s := &sampler{rng: rand.New(rand.NewPCG(seed, 42)), rate: float64(rate), countdown: make([]float64, threads)}
	for i := range s.countdown {
		s.countdown[i] = s.rng.ExpFloat64() * s.rate
	}
	return s
}

func (s *sampler) sample(thread int, size uint64) bool {
	s.countdown[thread] -= float64(size)
	if s.countdown[thread] > 0 {
		return false
	}
	s.countdown[thread] = s.rng.ExpFloat64() * s.rate
	return true
}

// workload is 100k allocations of 1 KiB at stack 1 and 50 of 1 MiB at
// stack 2, interleaved over 4 threads.
func workload(seed, rate uint64) *capture.Capture {
	smp := newSampler(seed, rate, 4)
	var allocs []capture.Alloc
	for i := range 100_000 {
		size, stack := uint64(1024), uint64(1)
		if i%2000 == 0 {
			size, stack = 1<<20, 2
		}
		if smp.sample(i%4, size) {
			allocs = append(allocs, alloc(1, int64(i), uint64(i)*16, size, stack))
		}
	}
	return synth(rate, allocs, nil, nil)
}

// TestUnbiasedEstimate checks that Allocs recovers known per-site totals
// from simulated samples within 4 standard deviations, for one capture and
// for the mean of many (which catches a bias too small to show in one).
func TestUnbiasedEstimate(t *testing.T) {
	const rate = 512 << 10
	sites := map[uint64]map[uint64]int{
		1: {1024: 100_000 - 50},
		2: {1 << 20: 50},
	}
	const runs = 200
	mean := map[uint64]float64{}
	for seed := range uint64(runs) {
		p := Allocs(workload(seed, rate), Options{})
		got := map[uint64]float64{}
		for _, s := range p.Samples {
			got[s.StackID] = s.Bytes
		}
		for stack, sizes := range sites {
			want, sd := trueBytes(sizes), Stddev(sizes, rate)
			if seed == 0 && math.Abs(got[stack]-want) > 4*sd {
				t.Errorf("stack %d: estimated %.0f bytes, want %.0f ± %.0f (4σ)", stack, got[stack], want, 4*sd)
			}
			mean[stack] += got[stack] / runs
		}
	}
	for stack, sizes := range sites {
		want, sd := trueBytes(sizes), Stddev(sizes, rate)/math.Sqrt(runs)
		if math.Abs(mean[stack]-want) > 4*sd {
			t.Errorf("stack %d: mean of %d estimates %.0f bytes, want %.0f ± %.0f (4σ)", stack, runs, mean[stack], want, 4*sd)
		}
	}
}

func trueBytes(sizes map[uint64]int) float64 {
	var b float64
	for s, n := range sizes {
		b += float64(s) * float64(n)
	}
	return b
}

func TestStddev(t *testing.T) {
	if got := Stddev(map[uint64]int{100: 5}, 1); got != 0 {
		t.Errorf("rate 1: %v, want 0", got)
	}
	// One allocation of s bytes: Var = s²(1−p)/p.
	s, r := 1024.0, 4096.0
	p := 1 - math.Exp(-s/r)
	want := math.Sqrt(s * s * (1 - p) / p)
	if got := Stddev(map[uint64]int{1024: 1}, 4096); !near(got, want) {
		t.Errorf("Stddev = %v, want %v", got, want)
	}
	if got := Variance(map[uint64]int{1024: 4}, 4096); !near(got, 4*want*want) {
		t.Errorf("Variance of 4 = %v, want %v", got, 4*want*want)
	}
}

func BenchmarkLeaks(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	var allocs []capture.Alloc
	var frees []capture.Free
	var order []int32
	for i := range 1_000_000 {
		addr := uint64(rng.IntN(1 << 20))
		allocs = append(allocs, alloc(1, int64(i), addr, 64, uint64(1+rng.IntN(100))))
		if i%2 == 1 {
			frees = append(frees, free(1, int64(i), addr))
			order = append(order, int32(len(allocs)))
		}
	}
	c := synth(4096, allocs, frees, order)
	b.ResetTimer()
	for range b.N {
		Leaks(c, Options{})
	}
}

// The interval each row states (Bytes ± CI95(Var), from the samples alone)
// covers the true bytes in about 95 % of runs. Sampling is simulated as the
// library does it: each allocation of s bytes independently with
// probability 1−(1−1/rate)^s. Sites of many small and of few large blocks;
// with 4000 runs the coverage of a true 95 % interval lies within
// ±0.012 (3.5σ) of 0.95, and the normal approximation for a site of ~40
// samples may lose a little more.
func TestIntervalsCoverTheTruth(t *testing.T) {
	const rate, runs = 64 << 10, 4000
	sites := []struct {
		stack    uint64
		n        int
		size     uint64
		minCover float64
	}{
		{1, 2000, 1000, 0.935},    // ~30 samples of 1000 B
		{2, 50, 100 << 10, 0.925}, // ~40 samples, each of weight 1.27
		{3, 20000, 48, 0.935},     // ~15 samples of 48 B
	}
	rng := rand.New(rand.NewPCG(7, 11))
	covered := make([]int, len(sites))
	for r := 0; r < runs; r++ {
		var allocs []capture.Alloc
		for _, s := range sites {
			p := 1 - math.Pow(1-1.0/rate, float64(s.size))
			for i := 0; i < s.n; i++ {
				if rng.Float64() < p {
					allocs = append(allocs, alloc(1, int64(len(allocs)), uint64(len(allocs)+1)*16, s.size, s.stack))
				}
			}
		}
		prof := Allocs(synth(rate, allocs, nil, nil), Options{})
		for i, s := range sites {
			truth := float64(s.n) * float64(s.size)
			for _, smp := range prof.Samples {
				if smp.StackID == s.stack && math.Abs(smp.Bytes-truth) <= CI95(smp.Var) {
					covered[i]++
				}
			}
		}
	}
	for i, s := range sites {
		cover := float64(covered[i]) / runs
		t.Logf("%d × %d B at rate %d: the stated 95 %% interval covered the truth in %.1f %% of %d runs", s.n, s.size, rate, 100*cover, runs)
		if cover < s.minCover || cover > 0.965 {
			t.Errorf("%d × %d B: coverage %.3f, want %.3f–0.965", s.n, s.size, cover, s.minCover)
		}
	}
}

// At rate 1 every allocation is sampled and the estimate is exact.
func TestIntervalExactAtRateOne(t *testing.T) {
	p := Allocs(synth(1, []capture.Alloc{alloc(1, 1, 0x10, 1000, 1), alloc(1, 2, 0x20, 7, 1)}, nil, nil), Options{})
	if p.Samples[0].Var != 0 || p.TotalVar != 0 || p.TotalBytes != 1007 {
		t.Errorf("rate 1: %v bytes, variance %v (total %v)", p.TotalBytes, p.Samples[0].Var, p.TotalVar)
	}
}
