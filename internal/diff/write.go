package diff

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// Run names one side of a comparison.
type Run struct {
	Path    string
	Command []string
}

// RunOf returns the Run of a capture read from path.
func RunOf(path string, c *capture.Capture) Run { return Run{Path: path, Command: c.Meta.Command} }

// A Format is one output of heaplens diff.
type Format struct {
	Name    string
	OneView bool // compares one view only (leaks unless one is named)
	Write   func(w io.Writer, in *Input) error
}

// Input is what a Format writes: per view compared, both runs' results
// and their comparison.
type Input struct {
	Base, New Run
	Results   [][2]*export.Result // per view: BASE's, NEW's
	Compared  []*Result           // per view
	Top       int                 // text: TextOptions.Top
}

// Formats lists every output once, in the order help shows them.
var Formats = []Format{
	{Name: "text", Write: func(w io.Writer, in *Input) error {
		return Text(w, in.Base, in.New, in.Compared, TextOptions{Top: in.Top})
	}},
	{Name: "json", Write: func(w io.Writer, in *Input) error {
		return JSON(w, in.Base, in.New, in.Compared)
	}},
	{Name: "pprof", OneView: true, Write: func(w io.Writer, in *Input) error {
		r := in.Results[0]
		return PProf(w, Side{r[0].Capture, r[0].Allocs(), r[0].Profile}, Side{r[1].Capture, r[1].Allocs(), r[1].Profile})
	}},
}

// LookupFormat returns the format of that name, or nil.
func LookupFormat(name string) *Format {
	for i := range Formats {
		if Formats[i].Name == name {
			return &Formats[i]
		}
	}
	return nil
}

// FormatNames lists the formats' names joined by sep, for help and errors.
func FormatNames(sep string) string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = f.Name
	}
	return strings.Join(names, sep)
}

// TextOptions tune Text.
type TextOptions struct {
	Top int // sites listed per direction; 0 means 10, negative means all
}

// Text writes, per view, the totals of both runs and the sites that grew or
// shrank beyond their interval, with their stacks, leaf first.
func Text(w io.Writer, base, next Run, results []*Result, opt TextOptions) error {
	bw := bufio.NewWriter(w)
	top := opt.Top
	if top == 0 {
		top = 10
	}
	fmt.Fprintf(bw, "base: %s  (%s)\n", base.Path, command(base.Command))
	fmt.Fprintf(bw, "new:  %s  (%s)\n", next.Path, command(next.Command))
	fmt.Fprintf(bw, "a site is a stack matched by its functions; ± is the interval of a change at which noise alone flags any site of a view with at most %.0f %% chance\n", 100*FamilyError)
	for _, r := range results {
		fmt.Fprintf(bw, "\n== %s ==  rate %s → %s;  %d sites, interval ±%.2f standard deviations\n",
			r.View, rateLabel(r.BaseRate), rateLabel(r.NewRate), len(r.Sites), r.Z)
		total := Site{Base: r.Base, New: r.New}
		fmt.Fprintf(bw, "total:  %s → %s  (%s%s)\n", size.Human(r.Base.Bytes), size.Human(r.New.Bytes),
			signed(total.Delta()), margin(total.Margin(1.96)))
		writeSites(bw, "grown", r.Grown(0), r.Z, top)
		writeSites(bw, "shrunk", r.Shrunk(), r.Z, top)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing diff: %w", err)
	}
	return nil
}

func writeSites(w io.Writer, what string, sites []*Site, z float64, top int) {
	if len(sites) == 0 {
		fmt.Fprintf(w, "%s: none\n", what)
		return
	}
	fmt.Fprintf(w, "%s: %d site%s\n", what, len(sites), plural(len(sites)))
	if top < 0 || top > len(sites) {
		top = len(sites)
	}
	for i, s := range sites[:top] {
		fmt.Fprintf(w, "#%d  %s%s  %s → %s  (%d → %d samples)\n", i+1, signed(s.Delta()), margin(s.Margin(z)),
			size.Human(s.Base.Bytes), size.Human(s.New.Bytes), s.Base.Count, s.New.Count)
		for _, f := range s.Frames {
			fmt.Fprintf(w, "      %s\n", f)
		}
	}
	if top < len(sites) {
		fmt.Fprintf(w, "… and %d more\n", len(sites)-top)
	}
}

func command(c []string) string {
	if len(c) == 0 {
		return "unknown command"
	}
	return strings.Join(c, " ")
}

func rateLabel(r uint64) string {
	if r <= 1 {
		return "1 B (exact)"
	}
	return size.FormatSize(r)
}

func signed(b float64) string {
	if b < 0 {
		return "−" + size.Human(-b)
	}
	return "+" + size.Human(b)
}

func margin(m float64) string {
	if m == 0 {
		return "" // rate 1 on both sides: exact
	}
	return " ± " + size.Human(m)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// JSON document of a comparison (docs/diff.md).
type jsonDoc struct {
	Base  jsonRun    `json:"base"`
	New   jsonRun    `json:"new"`
	Views []jsonView `json:"views"`
}

type jsonRun struct {
	Path    string   `json:"path"`
	Command []string `json:"command"`
}

type jsonView struct {
	View        string     `json:"view"`
	BaseRate    uint64     `json:"base_rate"`
	NewRate     uint64     `json:"new_rate"`
	Z           float64    `json:"z"`
	Base        jsonEst    `json:"base_total"`
	New         jsonEst    `json:"new_total"`
	Sites       []jsonSite `json:"sites"`
	FamilyError float64    `json:"family_error"`
}

type jsonEst struct {
	Bytes   float64 `json:"bytes"`
	Objects float64 `json:"objects"`
	Stddev  float64 `json:"bytes_stddev"`
	Samples int     `json:"samples"`
}

type jsonSite struct {
	Change string   `json:"change"` // "grown", "shrunk" or "same"
	Delta  float64  `json:"delta_bytes"`
	Margin float64  `json:"delta_margin"` // Z standard deviations of the delta
	Base   jsonEst  `json:"base"`
	New    jsonEst  `json:"new"`
	Frames []string `json:"frames"` // leaf first
}

func est(e Estimate) jsonEst {
	return jsonEst{Bytes: e.Bytes, Objects: e.Objects, Stddev: math.Sqrt(max(e.Var, 0)), Samples: e.Count}
}

// JSON writes every site of every view, with its change, as one document.
func JSON(w io.Writer, base, next Run, results []*Result) error {
	d := jsonDoc{Base: jsonRun(base), New: jsonRun(next), Views: []jsonView{}}
	for _, r := range results {
		v := jsonView{View: r.View, BaseRate: r.BaseRate, NewRate: r.NewRate, Z: r.Z,
			Base: est(r.Base), New: est(r.New), Sites: []jsonSite{}, FamilyError: FamilyError}
		for _, s := range r.Sites {
			m := s.Margin(r.Z)
			change := "same"
			switch {
			case s.Delta()-m > 0:
				change = "grown"
			case s.Delta()+m < 0:
				change = "shrunk"
			}
			v.Sites = append(v.Sites, jsonSite{Change: change, Delta: s.Delta(), Margin: m,
				Base: est(s.Base), New: est(s.New), Frames: s.Frames})
		}
		d.Views = append(d.Views, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return fmt.Errorf("writing diff JSON: %w", err)
	}
	return nil
}

// Side is one run's profiles in Go's heap shape: alloc is the allocs view,
// inuse the view compared (both without ByThread), as export.PProf takes.
type Side struct {
	Capture      *capture.Capture
	Alloc, Inuse *heap.Profile
}

// PProf writes NEW minus BASE as one pprof profile, the way go tool pprof
// -diff_base computes it: BASE's samples negated and labelled
// pprof::base=true, merged with NEW's. `go tool pprof -top` on the result
// shows each function's change; BASE and NEW written by
// `heaplens report --format pprof` give the same answer with -diff_base.
func PProf(w io.Writer, base, next Side) error {
	bp, err := side(base)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	np, err := side(next)
	if err != nil {
		return fmt.Errorf("new: %w", err)
	}
	bp.Scale(-1)
	for _, s := range bp.Sample {
		if s.Label == nil {
			s.Label = map[string][]string{}
		}
		s.Label["pprof::base"] = []string{"true"}
	}
	m, err := profile.Merge([]*profile.Profile{np, bp})
	if err != nil {
		return fmt.Errorf("merging profiles: %w", err)
	}
	if err := m.Write(w); err != nil {
		return fmt.Errorf("writing pprof: %w", err)
	}
	return nil
}

func side(s Side) (*profile.Profile, error) {
	var buf bytes.Buffer
	if err := export.PProf(&buf, s.Capture, s.Alloc, s.Inuse); err != nil {
		return nil, err
	}
	return profile.Parse(&buf)
}
