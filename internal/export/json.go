package export

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// Schema names the JSON format written by JSON; docs/json-format.md defines
// it. The number changes only when a field changes meaning or goes away;
// fields may be added.
const Schema = "heaplens-profile/1"

// Doc is one view of a capture as JSON: frames interned once, stacks as
// arrays of frame indices, samples as columns. The HTML report and the web
// UI load the same document.
type Doc struct {
	Schema        string            `json:"schema"`
	View          string            `json:"view"`
	Unit          string            `json:"unit"`
	Rate          uint64            `json:"rate"`
	Command       []string          `json:"command"`
	Host          string            `json:"host"`
	StartUnixNano int64             `json:"start_unix_nano"`
	At            *float64          `json:"at,omitempty"`
	HeapAt        *float64          `json:"heap_at,omitempty"`
	Lifetime      *float64          `json:"lifetime,omitempty"`
	Filter        map[string]string `json:"filter,omitempty"`
	Processes     []DocProcess      `json:"processes"`
	Drops         DocDrops          `json:"drops"`
	Notes         []string          `json:"notes"`
	Total         DocTotal          `json:"total"`
	Frames        []DocFrame        `json:"frames"`
	Stacks        [][]int           `json:"stacks"`
	Samples       DocSamples        `json:"samples"`
	Timeline      *DocTimeline      `json:"timeline,omitempty"`
}

// DocProcess is one stream.
type DocProcess struct {
	Stream  uint32    `json:"stream"`
	PID     int       `json:"pid"`
	PPID    int       `json:"ppid"`
	Label   string    `json:"label"`
	Cmdline []string  `json:"cmdline"`
	Exe     string    `json:"exe"`
	Status  string    `json:"status"`
	Drops   *DocDrops `json:"drops"`
	Peak    *DocPoint `json:"peak,omitempty"`
	End     *float64  `json:"end,omitempty"` // when it ended, seconds since the start
}

// DocDrops counts lost records.
type DocDrops struct {
	Allocs    uint64 `json:"allocs"`
	Frees     uint64 `json:"frees"`
	LostBytes uint64 `json:"lost_bytes"`
}

// DocTotal sums the samples.
type DocTotal struct {
	Bytes     float64 `json:"bytes"`
	BytesCI95 float64 `json:"bytes_ci95"` // half-width of the 95 % interval; 0 at rate 1
	Objects   float64 `json:"objects"`
	Samples   int     `json:"samples"`
}

// DocFrame is one function at one place. Kind is "native", "python" or
// "unknown" (a placeholder for something the capture lacks).
type DocFrame struct {
	Label  string `json:"label"`
	Name   string `json:"name"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Module string `json:"module,omitempty"`
	Kind   string `json:"kind"`
}

// DocSamples holds one column per field; row i is one (stream, stack,
// thread) of the view.
type DocSamples struct {
	Stream []uint32 `json:"stream"`
	Thread []uint32 `json:"thread"`
	Stack  []int    `json:"stack"`
	Bytes  []int64  `json:"bytes"`
	// BytesCI95 is the half-width of each row's 95 % interval (0 at rate 1).
	BytesCI95 []int64 `json:"bytes_ci95"`
	Objects   []int64 `json:"objects"`
	Count     []int   `json:"count"`
	// Attribution says how each row's bytes were charged: "self", or for
	// pool work "api", "openmp", "adapter", "fallback", "unattributed".
	Attribution []string `json:"attribution"`
	// Func is the hooked function the row's allocations went through
	// ("malloc", "calloc", "PyMem_Malloc", …), "" when several.
	Func []string `json:"func"`
}

// DocPoint is a time (seconds since the capture's start) and bytes.
type DocPoint struct {
	T     float64 `json:"t"`
	Bytes int64   `json:"bytes"`
}

// DocTimeline is the timeline view; series are [t, bytes] pairs.
type DocTimeline struct {
	End      float64      `json:"end"`
	Total    [][2]float64 `json:"total"`
	TotalRSS [][2]float64 `json:"total_rss"`
	Peak     DocPoint     `json:"peak"`
	PeakRSS  *DocPoint    `json:"peak_rss,omitempty"`
	// RSSHighWater is the kernel's high-water mark of RSS, bytes: exact,
	// where PeakRSS is the highest sampled reading (heap.HighWaterOf).
	RSSHighWater int64       `json:"rss_high_water,omitempty"`
	Streams      []DocSeries `json:"streams"`
	// Kinds is the estimated heap by kind of memory: malloc, pymem, mmap.
	Kinds map[string][][2]float64 `json:"kinds"`
	// MallocInUse and MallocFree are what glibc's malloc said its arenas
	// held (docs/views.md, "Where RSS goes").
	MallocInUse [][2]float64 `json:"malloc_in_use"`
	MallocFree  [][2]float64 `json:"malloc_free"`
}

// DocSeries is one stream's timeline.
type DocSeries struct {
	Stream uint32       `json:"stream"`
	Heap   [][2]float64 `json:"heap"`
	RSS    [][2]float64 `json:"rss"`
	Peak   DocPoint     `json:"peak"`
}

// DocOptions add what the profile alone does not say.
type DocOptions struct {
	Timeline *heap.Timeline    // nil leaves the timeline out
	Filter   map[string]string // the filters the user gave, for the header
}

// BuildDoc builds the JSON document of p.
func BuildDoc(c *capture.Capture, p *heap.Profile, opt DocOptions) *Doc {
	d := &Doc{Schema: Schema, View: p.View, Unit: "bytes", Rate: p.Rate, Command: c.Meta.Command, Host: c.Meta.Host,
		StartUnixNano: c.Meta.StartUnixNano, Filter: opt.Filter, Notes: []string{}, Processes: []DocProcess{},
		Samples: DocSamples{Stream: []uint32{}, Thread: []uint32{}, Stack: []int{}, Bytes: []int64{}, BytesCI95: []int64{}, Objects: []int64{}, Count: []int{}, Attribution: []string{}, Func: []string{}}}
	if d.Command == nil {
		d.Command = []string{}
	}
	secs := func(t int64) float64 { return float64(t-p.Start) / 1e9 }
	if p.View == "live" || p.View == "peak" {
		at, h := secs(p.At), math.Round(p.HeapAt)
		d.At, d.HeapAt = &at, &h
	}
	if p.View == "temporary" {
		l := p.Lifetime.Seconds()
		d.Lifetime = &l
	}
	var peaks map[uint32]heap.Point
	if tl := opt.Timeline; tl != nil {
		peaks = map[uint32]heap.Point{}
		for _, s := range tl.Streams {
			peaks[s.Stream] = s.Peak
		}
	}
	for _, pr := range c.Processes {
		if !p.Covers(pr.Stream) {
			continue
		}
		dp := DocProcess{Stream: pr.Stream, PID: pr.PID, PPID: pr.PPID, Label: ProcessLabel(c, pr.Stream),
			Cmdline: pr.Cmdline, Exe: pr.Exe, Status: exitStatus(c.Ends[pr.Stream])}
		if dp.Cmdline == nil {
			dp.Cmdline = []string{}
		}
		if ds, ok := p.Drops[pr.Stream]; ok {
			dp.Drops = &DocDrops{ds.DroppedAllocs, ds.DroppedFrees, ds.LostBytes}
			d.Drops.Allocs += ds.DroppedAllocs
			d.Drops.Frees += ds.DroppedFrees
			d.Drops.LostBytes += ds.LostBytes
		}
		if pk, ok := peaks[pr.Stream]; ok {
			dp.Peak = &DocPoint{secs(pk.T), int64(math.Round(pk.Bytes))}
		}
		if e := c.Ends[pr.Stream]; e != nil {
			end := secs(e.TimeNano)
			dp.End = &end
		}
		d.Processes = append(d.Processes, dp)
	}
	d.Notes = append(append(d.Notes, captureNotes(c, p)...), skewNotes(p)...)
	if n := poolNote(c, p); n != "" {
		d.Notes = append(d.Notes, n)
	}
	d.Total = DocTotal{Bytes: math.Round(p.TotalBytes), BytesCI95: math.Round(heap.CI95(p.TotalVar)),
		Objects: math.Round(p.TotalObjects), Samples: p.RawSamples()}

	in := newInterner(c)
	stackIdx := map[uint64]int{}
	s := &d.Samples
	for _, smp := range p.Samples {
		si, ok := stackIdx[smp.StackID]
		if !ok {
			si = len(d.Stacks)
			stackIdx[smp.StackID] = si
			d.Stacks = append(d.Stacks, in.stack(smp.StackID))
		}
		s.Stream = append(s.Stream, smp.Stream)
		s.Thread = append(s.Thread, smp.TID)
		s.Stack = append(s.Stack, si)
		s.Bytes = append(s.Bytes, int64(math.Round(smp.Bytes)))
		s.BytesCI95 = append(s.BytesCI95, int64(math.Round(heap.CI95(smp.Var))))
		s.Objects = append(s.Objects, int64(math.Round(smp.Objects)))
		s.Count = append(s.Count, smp.Count)
		s.Attribution = append(s.Attribution, Attribution(c, smp.StackID))
		s.Func = append(s.Func, capture.FuncNames[smp.Func]) // "" for heap.FuncMixed
	}
	d.Frames = in.frames
	if d.Frames == nil {
		d.Frames = []DocFrame{}
	}
	if d.Stacks == nil {
		d.Stacks = [][]int{}
	}
	if tl := opt.Timeline; tl != nil {
		series := func(ps []heap.Point) [][2]float64 {
			out := make([][2]float64, len(ps))
			for i, pt := range ps {
				out[i] = [2]float64{secs(pt.T), math.Round(pt.Bytes)}
			}
			return out
		}
		dt := &DocTimeline{End: secs(tl.End), Total: series(tl.Total), TotalRSS: series(tl.TotalRSS),
			Peak: DocPoint{secs(tl.Peak.T), int64(math.Round(tl.Peak.Bytes))}, Streams: []DocSeries{},
			Kinds: map[string][][2]float64{}, MallocInUse: series(tl.MallocInUse), MallocFree: series(tl.MallocFree)}
		for k, name := range capture.MemKinds {
			if k < len(tl.Kinds) {
				dt.Kinds[name] = series(tl.Kinds[k])
			}
		}
		if tl.PeakRSS.Bytes > 0 {
			dt.PeakRSS = &DocPoint{secs(tl.PeakRSS.T), int64(tl.PeakRSS.Bytes)}
		}
		dt.RSSHighWater = int64(heap.HighWaterOf(c, heap.Options{Streams: p.Streams}).Bytes)
		for _, st := range tl.Streams {
			dt.Streams = append(dt.Streams, DocSeries{Stream: st.Stream, Heap: series(st.Heap), RSS: series(st.RSS),
				Peak: DocPoint{secs(st.Peak.T), int64(math.Round(st.Peak.Bytes))}})
		}
		d.Timeline = dt
	}
	return d
}

// interner numbers frames and expands stacks into frame indices, leaf
// first, with the same labels and placeholders as StackFrames.
type interner struct {
	c      *capture.Capture
	frames []DocFrame
	byKey  map[DocFrame]int
	locs   map[uint64][]int
}

func newInterner(c *capture.Capture) *interner {
	return &interner{c: c, byKey: map[DocFrame]int{}, locs: map[uint64][]int{}}
}

func (in *interner) frame(f DocFrame) int {
	if i, ok := in.byKey[f]; ok {
		return i
	}
	i := len(in.frames)
	in.frames = append(in.frames, f)
	in.byKey[f] = i
	return i
}

func (in *interner) location(id uint64) []int {
	if fs, ok := in.locs[id]; ok {
		return fs
	}
	var fs []int
	loc := in.c.Locations[id]
	switch {
	case loc == nil: // none in a loaded capture (capture.Resolve)
	case len(loc.Lines) == 0:
		m := in.c.Mappings[loc.MappingID]
		f := DocFrame{Label: FrameLabel(loc, nil, m), Name: fmt.Sprintf("0x%x", loc.Address), Kind: loc.Kind.String()}
		if m != nil {
			f.Module = m.File
		}
		fs = []int{in.frame(f)}
	default:
		m := in.c.Mappings[loc.MappingID]
		for i := range loc.Lines {
			ln := &loc.Lines[i]
			f := DocFrame{Label: FrameLabel(loc, ln, m), Name: ln.Function, File: ln.File, Line: ln.Line, Kind: loc.Kind.String()}
			if m != nil && loc.Kind == capture.KindNative {
				f.Module = m.File
			}
			if f.Name == "" {
				f.Name = fmt.Sprintf("0x%x", loc.Address)
			}
			fs = append(fs, in.frame(f))
		}
	}
	in.locs[id] = fs
	return fs
}

func (in *interner) stack(id uint64) []int {
	st := in.c.Stacks[id]
	if st == nil { // 0: the allocation has no stack
		return []int{in.frame(DocFrame{Label: "<no stack>", Name: "<no stack>", Kind: capture.KindMissing.String()})}
	}
	out := []int{}
	for _, l := range st.Locations {
		out = append(out, in.location(l)...)
	}
	return out
}

// JSON writes p as a Doc (docs/json-format.md).
func JSON(w io.Writer, c *capture.Capture, p *heap.Profile, opt DocOptions) error {
	if err := json.NewEncoder(w).Encode(BuildDoc(c, p, opt)); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// Speedscope writes p in speedscope's file format
// (https://www.speedscope.app/file-format-schema.json): one "sampled"
// profile per process, unit bytes, each sample a stack root first with its
// estimated bytes as weight.
func Speedscope(w io.Writer, c *capture.Capture, p *heap.Profile) error {
	d := BuildDoc(c, p, DocOptions{})
	type frame struct {
		Name string `json:"name"`
		File string `json:"file,omitempty"`
		Line int    `json:"line,omitempty"`
	}
	type prof struct {
		Type       string  `json:"type"`
		Name       string  `json:"name"`
		Unit       string  `json:"unit"`
		StartValue int64   `json:"startValue"`
		EndValue   int64   `json:"endValue"`
		Samples    [][]int `json:"samples"`
		Weights    []int64 `json:"weights"`
	}
	out := struct {
		Schema string `json:"$schema"`
		Shared struct {
			Frames []frame `json:"frames"`
		} `json:"shared"`
		Profiles           []*prof `json:"profiles"`
		Name               string  `json:"name"`
		ActiveProfileIndex int     `json:"activeProfileIndex"`
		Exporter           string  `json:"exporter"`
	}{Schema: "https://www.speedscope.app/file-format-schema.json", Exporter: "heaplens",
		Name: fmt.Sprintf("heaplens %s: %s", p.View, strings.Join(c.Meta.Command, " "))}
	out.Shared.Frames = make([]frame, len(d.Frames))
	for i, f := range d.Frames {
		file := f.File
		if f.Kind == "native" && file == "" && f.Module != "" {
			file = filepath.Base(f.Module)
		}
		out.Shared.Frames[i] = frame{Name: f.Label, File: file, Line: f.Line}
	}
	byStream := map[uint32]*prof{}
	for i, st := range d.Samples.Stream {
		pr := byStream[st]
		if pr == nil {
			pr = &prof{Type: "sampled", Name: fmt.Sprintf("%s %s", ProcessLabel(c, st), p.View), Unit: "bytes",
				Samples: [][]int{}, Weights: []int64{}}
			byStream[st] = pr
			out.Profiles = append(out.Profiles, pr)
		}
		if d.Samples.Bytes[i] <= 0 {
			continue
		}
		leafFirst := d.Stacks[d.Samples.Stack[i]]
		root := make([]int, len(leafFirst))
		for j, f := range leafFirst {
			root[len(root)-1-j] = f
		}
		pr.Samples = append(pr.Samples, root)
		pr.Weights = append(pr.Weights, d.Samples.Bytes[i])
		pr.EndValue += d.Samples.Bytes[i]
	}
	if out.Profiles == nil {
		out.Profiles = []*prof{}
	}
	if err := json.NewEncoder(w).Encode(out); err != nil {
		return fmt.Errorf("writing speedscope: %w", err)
	}
	return nil
}
