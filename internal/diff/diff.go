// Package diff compares one view of two captures site by site and tells
// growth from sampling noise: which sites allocate, peak or leak more in a
// new run than in a base run, beyond what sampling alone could explain.
//
// A site is a call stack matched across runs by its functions, not its
// addresses (which differ between runs) nor its line numbers (which move
// when unrelated code is edited): see Key. Each side's estimate carries a
// variance computed from its samples (docs/views.md); a difference is called
// growth only when it exceeds Z(n) standard deviations (see Site.Margin), where
// Z(n) keeps the chance that any of the n sites compared is flagged by noise
// alone under 5 %.
package diff

import (
	"cmp"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
)

// FamilyError is the chance, over a whole comparison, that at least one
// site is reported as grown or shrunk by sampling noise alone.
const FamilyError = 0.05

// Estimate is what one run's view says of a site (or of the total).
type Estimate struct {
	Bytes   float64 // estimated bytes
	Objects float64 // estimated allocations
	Var     float64 // variance of Bytes; 0 at rate 1
	Count   int     // raw samples behind the estimate
}

func (e *Estimate) add(s *heap.Sample) {
	e.Bytes += s.Bytes
	e.Objects += s.Objects
	e.Var += s.Var
	e.Count += s.Count
}

// Site is one call stack's estimates in both runs.
type Site struct {
	Key       string   // the matching key (see Key)
	Frames    []string // labels of the site's largest stack, NEW's when it has one; leaf first
	Base, New Estimate

	best      float64 // bytes of the stack Frames was taken from
	bestStack uint64  // and its id, to break ties the same way every time
	bestNew   bool    // Frames is from NEW
}

func (s *Site) better(bytes float64, stack uint64) bool {
	return bytes > s.best || bytes == s.best && stack < s.bestStack
}

// Delta is the estimated growth in bytes (negative: the site shrank).
func (s *Site) Delta() float64 { return s.New.Bytes - s.Base.Bytes }

// Margin is the half-width of the difference's interval at z standard
// deviations. The variance of the difference is taken as twice the larger
// of the two sides' estimated variances rather than their sum: under "no
// change" both sides have the same true variance, and a side that drew few
// samples by chance also understates its own variance (a site of 8 blocks
// of 1 MiB sampled 3 times instead of 7 estimates half its true variance),
// which the sum would turn into a false regression.
func (s *Site) Margin(z float64) float64 { return z * math.Sqrt(2*max(s.Base.Var, s.New.Var, 0)) }

// Result is the comparison of one view.
type Result struct {
	View              string
	BaseRate, NewRate uint64
	Base, New         Estimate // totals of the view
	Z                 float64  // Z(len(Sites))
	Sites             []*Site  // by Delta, largest growth first
}

// Grown returns the sites whose growth exceeds over bytes beyond its
// interval: Delta − Margin > over. over = 0 lists every significant growth.
func (r *Result) Grown(over float64) []*Site {
	var out []*Site
	for _, s := range r.Sites {
		if s.Delta()-s.Margin(r.Z) > over {
			out = append(out, s)
		}
	}
	return out
}

// Shrunk returns the sites that shrank beyond their interval, largest
// decrease first.
func (r *Result) Shrunk() []*Site {
	var out []*Site
	for _, s := range slices.Backward(r.Sites) {
		if s.Delta()+s.Margin(r.Z) < 0 {
			out = append(out, s)
		}
	}
	return out
}

// Z returns the number of standard deviations a difference must exceed for
// a comparison of n sites to flag noise with probability at most
// FamilyError (Bonferroni over two-sided normal tests): Φ⁻¹(1 − FamilyError/2n).
// Z(1) is 1.96; Z(100) is 3.48.
func Z(n int) float64 {
	n = max(n, 1)
	p := 1 - FamilyError/(2*float64(n))
	return math.Sqrt2 * math.Erfinv(2*p-1)
}

// Compare matches the samples of two profiles of the same view by site. The
// profiles must not be split by thread (heap.Options.ByThread): thread ids
// differ between runs. Samples of all processes are summed per site; pids
// differ between runs too.
func Compare(bc *capture.Capture, base *heap.Profile, nc *capture.Capture, next *heap.Profile) *Result {
	r := &Result{View: next.View, BaseRate: base.Rate, NewRate: next.Rate}
	sites := map[string]*Site{}
	site := func(c *capture.Capture, stackID uint64, keys map[uint64]string) *Site {
		k, ok := keys[stackID]
		if !ok {
			k = Key(c, stackID)
			keys[stackID] = k
		}
		s := sites[k]
		if s == nil {
			s = &Site{Key: k}
			sites[k] = s
		}
		return s
	}
	// One site can gather several stacks (the same functions at different
	// lines); the labels shown are those of its largest stack in NEW, or in
	// BASE when NEW has none.
	type sk struct {
		site  *Site
		stack uint64
	}
	add := func(c *capture.Capture, p *heap.Profile, newSide bool) {
		total := &r.Base
		if newSide {
			total = &r.New
		}
		perStack := map[sk]float64{}
		keys := map[uint64]string{}
		for i := range p.Samples {
			smp := &p.Samples[i]
			s := site(c, smp.StackID, keys)
			if newSide {
				s.New.add(smp)
			} else {
				s.Base.add(smp)
			}
			total.add(smp)
			perStack[sk{s, smp.StackID}] += smp.Bytes
		}
		for k, b := range perStack {
			if s := k.site; s.Frames == nil || newSide != s.bestNew || s.better(b, k.stack) {
				s.Frames, s.best, s.bestStack, s.bestNew = export.StackFrames(c, k.stack), b, k.stack, newSide
			}
		}
	}
	add(bc, base, false)
	add(nc, next, true)
	for _, s := range sites {
		r.Sites = append(r.Sites, s)
	}
	slices.SortFunc(r.Sites, func(a, b *Site) int {
		if c := cmp.Compare(b.Delta(), a.Delta()); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	r.Z = Z(len(r.Sites))
	return r
}

// Key is the run-independent identity of a stack: per frame, leaf first, the
// function and the last two elements of its file (native frames without a
// symbol: the module and the offset in it), one frame per line. Addresses
// move between runs (ASLR), line numbers move with unrelated edits, and
// full paths differ between checkouts and virtual environments; none of
// them is part of the key.
func Key(c *capture.Capture, stackID uint64) string {
	st := c.Stacks[stackID]
	if st == nil {
		return "?"
	}
	var b strings.Builder
	for _, id := range st.Locations {
		loc := c.Locations[id]
		switch {
		case loc == nil:
			b.WriteString("?\n")
		case len(loc.Lines) == 0:
			m := c.Mappings[loc.MappingID]
			if m == nil {
				b.WriteString("?\n")
				continue
			}
			b.WriteString(filepath.Base(m.File))
			b.WriteString("+0x")
			b.WriteString(strconv.FormatUint(loc.Address-m.Start+m.Offset, 16))
			b.WriteByte('\n')
		default:
			for _, ln := range loc.Lines {
				b.WriteString(ln.Function)
				if ln.File != "" {
					b.WriteString(" (")
					b.WriteString(lastTwo(ln.File))
					b.WriteByte(')')
				}
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// lastTwo returns the last two elements of a path: "pkg/mod.py" tells two
// __init__.py apart without the checkout's or the venv's own directories.
func lastTwo(p string) string {
	dir, file := filepath.Split(filepath.Clean(p))
	if dir == "" || dir == "/" {
		return file
	}
	return filepath.Join(filepath.Base(dir), file)
}
