package compare

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// How many sites of each view the accuracy table shows (besides the total).
const (
	topAllocSites = 4
	topPeakSites  = 3
	topLeakSites  = 2
)

// minSiteShare is the smallest share of a view a site needs for a row.
const minSiteShare = 0.02

// totalSite names the row of a whole view (every site together).
const totalSite = "(total)"

// SiteAccuracy compares heaplens' estimates of one site at the default
// rate (one per seed) with the exact value of a --rate 1 run.
type SiteAccuracy struct {
	View  string  `json:"view"` // allocs, peak or leaks
	Site  string  `json:"site"`
	Exact float64 `json:"exact_bytes"`
	// Sigma is the standard deviation of the estimate the sampling math
	// predicts (heap.Stddev over the exact run's allocation sizes of the
	// site: for peak and leaks, of the blocks live at the exact peak or at
	// exit).
	Sigma     float64   `json:"sigma_bytes"`
	Estimates []float64 `json:"estimates"`
	// Per estimate: (estimate − exact) / exact and (estimate − exact) / σ.
	RelErr []float64 `json:"rel_err"`
	Z      []float64 `json:"z"`
	// MeanAbsRel is the mean |relative error|; MaxAbsZ the worst |z|.
	MeanAbsRel float64 `json:"mean_abs_rel_err"`
	MaxAbsZ    float64 `json:"max_abs_z"`
	Within     bool    `json:"within"` // MaxAbsZ ≤ goalSigmas
	// Expected is the exact value the workload's code fixes (0: none), and
	// How the arithmetic; ExactOK says --rate 1 found exactly that.
	Expected float64 `json:"expected_bytes,omitempty"`
	How      string  `json:"expected_how,omitempty"`
	ExactOK  bool    `json:"exact_matches_expected,omitempty"`
}

// AccuracyResult is one workload's accuracy section.
type AccuracyResult struct {
	Workload string         `json:"workload"`
	Args     []string       `json:"args"`
	Seeds    []uint64       `json:"seeds"`
	Rate     uint64         `json:"rate"`
	Sites    []SiteAccuracy `json:"sites"`
	// RefDrops are the records the --rate 1 reference run dropped (then it
	// is not exact); RefRingSize is set when it had to be rerun with a
	// larger ring to drop nothing.
	RefDrops    uint64 `json:"reference_drops"`
	RefRingSize string `json:"reference_ring_size,omitempty"`
	Note        string `json:"note,omitempty"`
}

// accuracy runs w at its small size, interleaved: bare, --rate 1 (the
// exact reference, and the rate-1 overhead), and the default rate with seed
// i in round i (the estimates); then compares estimates with exact values.
func (b *bench) accuracy(w *workload, res *WorkloadResult) (AccuracyResult, error) {
	acc := AccuracyResult{Workload: w.Name, Args: w.Small, Rate: defaultRate}
	logf("%s %s: bare, --rate 1 and seeded default rate × %d runs", w.Name, strings.Join(w.Small, " "), b.o.Runs)
	cfgs := []config{cfgBare, cfgRate1, seeded(1)}
	ms := make([][]Measurement, len(cfgs))
	for i := 0; i < b.o.Runs; i++ {
		for _, j := range harness.Rotation(len(cfgs), i) {
			c := cfgs[j]
			if j == 2 {
				c = seeded(uint64(i + 1))
				acc.Seeds = append(acc.Seeds, c.seed)
			}
			keep := j == 2 || (j == 1 && i == 0)
			m, err := b.runOnce(c, w, w.Small, keep)
			if err != nil {
				return acc, err
			}
			ms[j] = append(ms[j], m)
		}
	}
	sort.Slice(acc.Seeds, func(i, j int) bool { return acc.Seeds[i] < acc.Seeds[j] })
	names := []string{cfgBare.Name, cfgRate1.Name, "heaplens (seeds)"}
	for j := range cfgs {
		res.SmallConfigs = append(res.SmallConfigs, summarize(names[j], w.Small, ms[j]))
	}
	ratios(res.SmallConfigs)
	r1 := res.SmallConfigs[1]
	logf("%s, --rate 1: %.2f s (×%.2f wall), capture %s", w.Name, r1.WallS, r1.WallRatio, harness.ByteLabel(r1.Capture))
	if bad := checksumMismatch(ms); bad != "" {
		b.warnings.Add(fmt.Sprintf("%s (small): checksums differ between runs: %s", w.Name, bad))
	}
	defer func() {
		for _, runs := range ms {
			for _, m := range runs {
				if m.capture != "" {
					os.Remove(m.capture)
				}
			}
		}
	}()

	ref := ms[1][0].capture
	views := w.views
	exact := map[string]*reportDoc{}
	for _, v := range views {
		d, err := b.report(ref, v)
		if err != nil {
			return acc, err
		}
		exact[v] = d
	}
	acc.RefDrops = exact["allocs"].dropped()
	if acc.RefDrops > 0 {
		// Not exact: rerun once with a ring large enough to drop nothing.
		b.warnings.Add(fmt.Sprintf("%s: the --rate 1 reference run dropped %d records with the default ring; rerun with --ring-size 1GiB",
			w.Name, acc.RefDrops))
		big := cfgRate1
		big.Name, big.ring = "heaplens --rate 1 --ring-size 1GiB", "1GiB"
		m, err := b.runOnce(big, w, w.Small, true)
		if err != nil {
			return acc, err
		}
		defer os.Remove(m.capture)
		ref, acc.RefRingSize = m.capture, big.ring
		for _, v := range views {
			if exact[v], err = b.report(ref, v); err != nil {
				return acc, err
			}
		}
		if d := exact["allocs"].dropped(); d > 0 {
			acc.Note = fmt.Sprintf("the reference still dropped %d records: exact values are low", d)
		}
	}
	c, err := capture.Load(ref)
	if err != nil {
		return acc, fmt.Errorf("%s: loading the reference capture: %w", w.Name, err)
	}
	stack.Stitch(c)
	sizes := siteSizes(c, w.site, views)
	estimates := map[string][]*reportDoc{}
	for _, m := range ms[2] {
		for _, v := range views {
			d, err := b.report(m.capture, v)
			if err != nil {
				return acc, err
			}
			estimates[v] = append(estimates[v], d)
		}
	}
	var expect []expectation
	if w.expect != nil {
		expect = w.expect(w.Small)
	}
	top := map[string]int{"allocs": topAllocSites, "peak": topPeakSites, "leaks": topLeakSites}
	for _, v := range views {
		ex := exact[v].sites(w.site)
		est := make([]map[string]float64, len(estimates[v]))
		for k, d := range estimates[v] {
			est[k] = d.sites(w.site)
		}
		// Sites below 2 % of the view are noise next to the total; the
		// sites the workload's code fixes are always shown.
		rows := []string{totalSite}
		for _, s := range topSites(ex, top[v]) {
			if ex[s] >= minSiteShare*exact[v].total(v) {
				rows = append(rows, s)
			}
		}
		for _, e := range expect {
			if e.View == v {
				if s := findSite(ex, e.Site); s != "" && !contains(rows, s) {
					rows = append(rows, s)
				}
			}
		}
		for _, site := range rows {
			var xs []float64
			for k := range est {
				if site == totalSite {
					xs = append(xs, estimates[v][k].total(v))
				} else {
					xs = append(xs, est[k][site])
				}
			}
			e := ex[site]
			if site == totalSite {
				e = exact[v].total(v)
			}
			sa := compareSite(v, site, e, heap.Stddev(sizes[v][site], defaultRate), xs)
			for _, x := range expect {
				if x.View == v && strings.HasPrefix(site, x.Site) {
					sa.Expected, sa.How = x.Bytes, x.How
					sa.ExactOK = math.Abs(e-x.Bytes) < 0.5
				}
			}
			acc.Sites = append(acc.Sites, sa)
		}
	}
	for _, s := range acc.Sites {
		logf("%s %s %s: exact %s, σ %.1f%%, mean |err| %.1f%%, max |z| %.2f", w.Name, s.View, shortSite(s.Site),
			harness.ByteLabel(s.Exact), 100*ratio(s.Sigma, s.Exact), 100*s.MeanAbsRel, s.MaxAbsZ)
	}
	return acc, nil
}

// compareSite computes the errors of estimates xs of a site whose exact
// value is exact and whose predicted standard deviation is sigma.
func compareSite(view, site string, exact, sigma float64, xs []float64) SiteAccuracy {
	sa := SiteAccuracy{View: view, Site: site, Exact: exact, Sigma: sigma, Estimates: xs, Within: true}
	for _, x := range xs {
		d := x - exact
		rel := ratio(d, exact)
		z := 0.0
		switch {
		case sigma > 0:
			z = d / sigma
		case math.Abs(d) > 0.5:
			// No variance predicted (every block at least ~10× the rate
			// is sampled surely) yet an error: infinitely many σ.
			z = math.Inf(sign(d))
		}
		sa.RelErr = append(sa.RelErr, rel)
		sa.Z = append(sa.Z, z)
		sa.MeanAbsRel += math.Abs(rel) / float64(len(xs))
		sa.MaxAbsZ = math.Max(sa.MaxAbsZ, math.Abs(z))
	}
	sa.Within = sa.MaxAbsZ <= goalSigmas
	return sa
}

func sign(x float64) int {
	if x < 0 {
		return -1
	}
	return 1
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// topSites returns the n sites with the most bytes ("" excluded).
func topSites(m map[string]float64, n int) []string {
	var ks []string
	for k := range m {
		if k != "" {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool {
		if m[ks[i]] != m[ks[j]] {
			return m[ks[i]] > m[ks[j]]
		}
		return ks[i] < ks[j]
	})
	if len(ks) > n {
		ks = ks[:n]
	}
	return ks
}

// findSite returns the site with the most bytes among those starting with
// prefix, "" if none.
func findSite(m map[string]float64, prefix string) string {
	best := ""
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && (best == "" || v > m[best]) {
			best = k
		}
	}
	return best
}

// shortSite shows a site label with its file's directory dropped.
func shortSite(s string) string {
	name, loc, ok := strings.Cut(s, " (")
	if !ok {
		return s
	}
	return name + " (" + filepath.Base(strings.TrimSuffix(loc, ")")) + ")"
}

// reportDoc is the part of a `heaplens report --format json` document
// (docs/json-format.md) the accuracy section reads.
type reportDoc struct {
	View   string   `json:"view"`
	Rate   uint64   `json:"rate"`
	HeapAt *float64 `json:"heap_at"`
	Drops  struct {
		Allocs    uint64 `json:"allocs"`
		Frees     uint64 `json:"frees"`
		LostBytes uint64 `json:"lost_bytes"`
	} `json:"drops"`
	Total struct {
		Bytes   float64 `json:"bytes"`
		Samples int     `json:"samples"`
	} `json:"total"`
	Frames []struct {
		Label string `json:"label"`
	} `json:"frames"`
	Stacks  [][]int `json:"stacks"`
	Samples struct {
		Stack []int     `json:"stack"`
		Bytes []float64 `json:"bytes"`
	} `json:"samples"`
}

func (d *reportDoc) dropped() uint64 { return d.Drops.Allocs + d.Drops.Frees + d.Drops.LostBytes }

// total is the view's whole estimate: for peak the estimated heap at the
// peak (heap_at), else the sum of the samples.
func (d *reportDoc) total(view string) float64 {
	if view == "peak" && d.HeapAt != nil {
		return *d.HeapAt
	}
	return d.Total.Bytes
}

// sites sums the samples' bytes per site (site of the stack's frame labels).
func (d *reportDoc) sites(site func([]string) string) map[string]float64 {
	out := map[string]float64{}
	memo := map[int]string{}
	for i, st := range d.Samples.Stack {
		s, ok := memo[st]
		if !ok {
			var labels []string
			if st >= 0 && st < len(d.Stacks) {
				for _, f := range d.Stacks[st] {
					if f >= 0 && f < len(d.Frames) {
						labels = append(labels, d.Frames[f].Label)
					}
				}
			}
			s = site(labels)
			memo[st] = s
		}
		if i < len(d.Samples.Bytes) {
			out[s] += d.Samples.Bytes[i]
		}
	}
	return out
}

// report runs `heaplens report CAP --view V --format json` and parses it.
func (b *bench) report(capturePath, view string) (*reportDoc, error) {
	out, err := exec.Command(b.heaplens, "report", capturePath, "--view", view, "--format", "json").Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = harness.LastLines(string(ee.Stderr), 5)
		}
		return nil, fmt.Errorf("heaplens report %s --view %s: %v %s", filepath.Base(capturePath), view, err, msg)
	}
	d := new(reportDoc)
	if err := json.Unmarshal(out, d); err != nil {
		return nil, fmt.Errorf("heaplens report %s --view %s: %w", filepath.Base(capturePath), view, err)
	}
	return d, nil
}

// siteSizes returns, per view and site, the sizes of the reference
// capture's allocations the view covers (size → count): every allocation
// for allocs, the blocks live at the peak for peak, at the end for leaks.
// The totalSite entry holds all of them. Sites are named from the same
// frame labels the JSON report uses (export.StackFrames).
func siteSizes(c *capture.Capture, site func([]string) string, views []string) map[string]map[string]map[uint64]int {
	names := map[uint64]string{}
	siteOf := func(stack uint64) string {
		s, ok := names[stack]
		if !ok {
			s = site(export.StackFrames(c, stack))
			names[stack] = s
		}
		return s
	}
	out := map[string]map[string]map[uint64]int{}
	add := func(view string, a *capture.Alloc) {
		m := out[view]
		if m == nil {
			m = map[string]map[uint64]int{}
			out[view] = m
		}
		for _, s := range []string{siteOf(a.StackID), totalSite} {
			if m[s] == nil {
				m[s] = map[uint64]int{}
			}
			m[s][a.Size]++
		}
	}
	for _, v := range views {
		switch v {
		case "allocs":
			for i := range c.Allocs {
				add(v, &c.Allocs[i])
			}
		case "peak":
			at := heap.Peak(c, heap.Options{}).At
			for _, i := range liveAt(c, at) {
				add(v, &c.Allocs[i])
			}
		case "leaks":
			for _, i := range liveAt(c, math.MaxInt64) {
				add(v, &c.Allocs[i])
			}
		}
	}
	return out
}

// liveAt returns the indices of the allocations live at time at: allocated
// at or before it and not freed by then. Records are replayed in file
// order (Capture.FreeOrder places the frees among the allocations; every
// free follows the allocation it releases), or in time order when the
// capture has no usable FreeOrder.
func liveAt(c *capture.Capture, at int64) []int {
	type key struct {
		stream uint32
		addr   uint64
	}
	order := c.FreeOrder
	if len(order) != len(c.Frees) || !slices.IsSorted(order) {
		order = timeOrder(c)
	}
	live := map[key]int{}
	j := 0
	free := func(upTo int) {
		for ; j < len(c.Frees) && int(order[j]) <= upTo; j++ {
			if f := &c.Frees[j]; f.TimeNano <= at {
				delete(live, key{f.Stream, f.Addr})
			}
		}
	}
	for i := range c.Allocs {
		free(i)
		if a := &c.Allocs[i]; a.TimeNano <= at {
			live[key{a.Stream, a.Addr}] = i
		}
	}
	free(len(c.Allocs))
	idx := make([]int, 0, len(live))
	for _, i := range live {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

// timeOrder is a FreeOrder from timestamps: each free goes before the
// first allocation stamped after it (frees first on ties). It assumes
// both slices are in time order, as one thread's records are.
func timeOrder(c *capture.Capture) []int32 {
	order := make([]int32, len(c.Frees))
	i := 0
	for j := range c.Frees {
		for i < len(c.Allocs) && c.Allocs[i].TimeNano < c.Frees[j].TimeNano {
			i++
		}
		order[j] = int32(i)
	}
	return order
}
