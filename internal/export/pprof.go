package export

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// PProf writes a gzipped pprof profile in exactly the shape of Go's heap
// profiles (runtime/pprof protomem.go), so go tool pprof, Pyroscope,
// Grafana and Parca read it as memory:
//
//   - sample types alloc_objects/count, alloc_space/bytes,
//     inuse_objects/count, inuse_space/bytes; period type space/bytes,
//     period = the sampling rate;
//   - values are unbiased estimates, and each sample carries the numeric
//     label "bytes" (average block size) as Go's do;
//   - each sample is labelled with the process ("pid", string) and the
//     allocating thread ("thread_id", numeric).
//
// alloc is the allocs view and inuse the view shown; both must have been
// computed with heap.Options.ByThread. For the allocs view inuse is the live
// set at exit (what Go reports at exit) and the default sample type is
// alloc_space; for the temporary view alloc holds the temporary blocks,
// inuse is empty and the default is alloc_space; otherwise the default is
// inuse_space.
//
// Native frames carry their mapping (file, build ID, address range) and one
// Line per inlined function, innermost first. Python frames have no mapping
// and address 0: function = qualified name, filename = co_filename.
func PProf(w io.Writer, c *capture.Capture, alloc, inuse *heap.Profile) error {
	return writeProfile(w, buildPProf(c, alloc, inuse))
}

// PProfWindow is PProf for profiles that cover the window [start,
// start+d), such as the deltas a fleet profiler takes: it stamps the window
// as TimeNanos and DurationNanos, as Go's delta profiles do.
func PProfWindow(w io.Writer, c *capture.Capture, alloc, inuse *heap.Profile, start time.Time, d time.Duration) error {
	p := buildPProf(c, alloc, inuse)
	p.TimeNanos, p.DurationNanos = start.UnixNano(), d.Nanoseconds()
	return writeProfile(w, p)
}

func writeProfile(w io.Writer, p *profile.Profile) error {
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("writing pprof: %w", err)
	}
	return nil
}

type pprofKey struct {
	stream uint32
	stack  uint64
	tid    uint32
}

func buildPProf(c *capture.Capture, alloc, inuse *heap.Profile) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"},
			{Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"},
			{Type: "inuse_space", Unit: "bytes"},
		},
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            int64(max(c.Meta.Rate, 1)),
		TimeNanos:         c.Meta.StartUnixNano,
		DefaultSampleType: "inuse_space",
	}
	if inuse.View == "allocs" || inuse.View == "temporary" {
		p.DefaultSampleType = "alloc_space"
	}
	p.Comments = append(p.Comments, "heaplens view: "+inuse.View, "command: "+strings.Join(c.Meta.Command, " "))
	var da, df uint64
	for _, d := range inuse.Drops {
		da, df = da+d.DroppedAllocs, df+d.DroppedFrees
	}
	p.Comments = append(p.Comments, fmt.Sprintf("dropped records: %d allocs, %d frees", da, df))

	b := &pprofBuilder{c: c, p: p, locs: map[uint64]*profile.Location{}, maps: map[uint64]*profile.Mapping{},
		funcs: map[[2]string]*profile.Function{}, holes: map[string]*profile.Location{}}
	samples := map[pprofKey]*profile.Sample{}
	var order []pprofKey
	add := func(prof *heap.Profile, off int) {
		if prof == nil {
			return
		}
		for _, s := range prof.Samples {
			k := pprofKey{s.Stream, s.StackID, s.TID}
			ps := samples[k]
			if ps == nil {
				ps = &profile.Sample{Location: b.stack(s.Stream, s.StackID), Value: make([]int64, 4),
					Label: map[string][]string{}, NumLabel: map[string][]int64{}}
				if pr := c.Process(s.Stream); pr != nil {
					ps.Label["pid"] = []string{strconv.Itoa(pr.PID)}
					if pr.Exe != "" {
						ps.Label["process"] = []string{filepath.Base(pr.Exe)}
					}
				}
				if s.TID != 0 {
					ps.NumLabel["thread_id"] = []int64{int64(s.TID)}
				}
				if s.Func != heap.FuncMixed {
					ps.Label["kind"] = []string{capture.MemKind(s.Func)}
				}
				if a := Attribution(c, s.StackID); a != "self" {
					ps.Label["attribution"] = []string{a}
				}
				samples[k] = ps
				order = append(order, k)
			} else if kind := ps.Label["kind"]; len(kind) > 0 && (s.Func == heap.FuncMixed || capture.MemKind(s.Func) != kind[0]) {
				// The fleet's profile keeps kinds apart; one pprof sample
				// holding several is labelled with none, as a mixed one is.
				delete(ps.Label, "kind")
			}
			ps.Value[off] += int64(math.Round(s.Objects))
			ps.Value[off+1] += int64(math.Round(s.Bytes))
			if s.Objects > 0 {
				ps.NumLabel["bytes"] = []int64{int64(math.Round(s.Bytes / s.Objects))}
			}
		}
	}
	if inuse.View == "temporary" {
		add(inuse, 0)
	} else {
		add(alloc, 0)
		add(inuse, 2)
	}
	for _, k := range order {
		p.Sample = append(p.Sample, samples[k])
	}
	b.mainFirst()
	return p
}

// mainFirst makes the first process's executable the profile's first
// mapping, which pprof takes for the main binary ("File:" in its header),
// adding one without addresses when no location lies in it (a Python
// program's interpreter frames may all be hidden).
func (b *pprofBuilder) mainFirst() {
	if len(b.c.Processes) == 0 || b.c.Processes[0].Exe == "" {
		return
	}
	exe := b.c.Processes[0].Exe
	ms := b.p.Mapping
	i := slices.IndexFunc(ms, func(m *profile.Mapping) bool { return m.File == exe })
	if i < 0 {
		ms = append(ms, &profile.Mapping{File: exe})
		i = len(ms) - 1
	}
	main := ms[i]
	copy(ms[1:i+1], ms[:i])
	ms[0] = main
	for j, m := range ms {
		m.ID = uint64(j + 1)
	}
	b.p.Mapping = ms
}

type pprofBuilder struct {
	c     *capture.Capture
	p     *profile.Profile
	locs  map[uint64]*profile.Location
	maps  map[uint64]*profile.Mapping
	funcs map[[2]string]*profile.Function
	holes map[string]*profile.Location // placeholders by name
}

func (b *pprofBuilder) function(name, file string) *profile.Function {
	k := [2]string{name, file}
	if f := b.funcs[k]; f != nil {
		return f
	}
	// SystemName stays empty: pprof's C++ demangling heuristic would
	// otherwise rewrite names such as "<module>" (see ecosystem notes).
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, Filename: file}
	b.p.Function = append(b.p.Function, f)
	b.funcs[k] = f
	return f
}

func (b *pprofBuilder) mapping(id uint64) *profile.Mapping {
	if id == 0 {
		return nil
	}
	if m := b.maps[id]; m != nil {
		return m
	}
	cm := b.c.Mappings[id]
	if cm == nil {
		return nil
	}
	m := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), Start: cm.Start, Limit: cm.Limit, Offset: cm.Offset,
		File: cm.File, BuildID: cm.BuildID, HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	b.p.Mapping = append(b.p.Mapping, m)
	b.maps[id] = m
	return m
}

// placeholder is a location that only names what is missing.
func (b *pprofBuilder) placeholder(name string) *profile.Location {
	if l := b.holes[name]; l != nil {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: b.function(name, "")}}}
	b.p.Location = append(b.p.Location, l)
	b.holes[name] = l
	return l
}

func (b *pprofBuilder) location(id uint64) *profile.Location {
	if l := b.locs[id]; l != nil {
		return l
	}
	cl := b.c.Locations[id]
	if cl == nil { // none in a loaded capture (capture.Resolve)
		return nil
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1)}
	if cl.Kind != capture.KindNative { // Python code, or a frame made up when reading
		for _, ln := range cl.Lines {
			l.Line = append(l.Line, profile.Line{Function: b.function(ln.Function, ln.File), Line: int64(ln.Line)})
		}
	} else {
		l.Address = cl.Address
		l.Mapping = b.mapping(cl.MappingID)
		for _, ln := range cl.Lines {
			name := ln.Function
			if name == "" {
				name = fmt.Sprintf("0x%x", cl.Address)
			}
			l.Line = append(l.Line, profile.Line{Function: b.function(name, ln.File), Line: int64(ln.Line)})
		}
	}
	b.p.Location = append(b.p.Location, l)
	b.locs[id] = l
	return l
}

func (b *pprofBuilder) stack(stream uint32, id uint64) []*profile.Location {
	st := b.c.Stacks[id]
	if st == nil { // 0: the allocation has no stack
		return []*profile.Location{b.placeholder("<no stack>")}
	}
	out := make([]*profile.Location, 0, len(st.Locations))
	for _, id := range st.Locations {
		if l := b.location(id); l != nil {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		out = append(out, b.placeholder("<no frames>"))
	}
	return out
}
