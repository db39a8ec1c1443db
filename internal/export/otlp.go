package export

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	collpb "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	commonpb "go.opentelemetry.io/proto/slim/otlp/common/v1"
	profpb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	respb "go.opentelemetry.io/proto/slim/otlp/resource/v1"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// Attributes of OTLP profiles, from the OpenTelemetry semantic conventions
// where there is one.
const (
	AttrServiceName   = "service.name"
	AttrHostName      = "host.name"
	AttrPID           = "process.pid"
	AttrExeName       = "process.executable.name"
	AttrCommandLine   = "process.command_line"
	AttrRuntimeName   = "process.runtime.name"
	AttrRuntimeVer    = "process.runtime.version"
	AttrThreadID      = "thread.id"
	AttrFrameType     = "profile.frame.type"
	AttrBuildID       = "process.executable.build_id.gnu"
	AttrMemoryKind    = "heaplens.memory.kind" // malloc, pymem or mmap: no convention names it
	AttrAttribution   = "heaplens.attribution" // how pool work was charged to its origin
	OTLPScopeName     = "heaplens"
	frameTypeNative   = "native"
	frameTypeCPython  = "cpython"
	profileTypeMemory = "space"
)

// KeyValue is one resource attribute: Value is a string or an int64.
type KeyValue struct {
	Key   string
	Value any
}

// OTLPProfiles returns the OTLP profiles request for the window [start,
// start+d): four profiles sharing one dictionary, as the OpenTelemetry
// eBPF profiler's memory profiles are shaped — alloc_objects/count and
// alloc_space/bytes from alloc (what was allocated in the window),
// inuse_objects/count and inuse_space/bytes from inuse (live at its end);
// period type space/bytes, period = the sampling rate; values are the
// unbiased estimates of our pprof output, rounded.
//
// The resource is the command heaplens profiles (resource, plus
// process.runtime.* when its process is CPython). Each sample says which
// process of its tree and thread made it (process.pid,
// process.executable.name, thread.id) and the memory kind. Functions,
// files and lines are those of PProf; native frames carry their mapping
// and profile.frame.type "native", Python frames "cpython".
func OTLPProfiles(c *capture.Capture, alloc, inuse *heap.Profile, start time.Time, d time.Duration, resource []KeyValue, version string) *collpb.ExportProfilesServiceRequest {
	b := &otlpBuilder{c: c, dict: &profpb.ProfilesDictionary{
		MappingTable:   []*profpb.Mapping{{}},
		LocationTable:  []*profpb.Location{{}},
		FunctionTable:  []*profpb.Function{{}},
		LinkTable:      []*profpb.Link{{TraceId: make([]byte, 16), SpanId: make([]byte, 8)}},
		StringTable:    []string{""},
		AttributeTable: []*profpb.KeyValueAndUnit{{}},
		StackTable:     []*profpb.Stack{{}},
	}, strs: map[string]int32{"": 0}, attrs: map[attrKey]int32{}, funcs: map[[2]string]int32{},
		maps: map[uint64]int32{}, locs: map[uint64]int32{}, stacks: map[string]int32{}, holes: map[string]int32{}}

	profiles := []*profpb.Profile{
		b.profile("alloc_objects", "count", alloc, start, d, func(s *heap.Sample) float64 { return s.Objects }),
		b.profile("alloc_space", "bytes", alloc, start, d, func(s *heap.Sample) float64 { return s.Bytes }),
		b.profile("inuse_objects", "count", inuse, start, d, func(s *heap.Sample) float64 { return s.Objects }),
		b.profile("inuse_space", "bytes", inuse, start, d, func(s *heap.Sample) float64 { return s.Bytes }),
	}
	res := &respb.Resource{}
	for _, kv := range resource {
		res.Attributes = append(res.Attributes, &commonpb.KeyValue{Key: kv.Key, Value: anyValue(kv.Value)})
	}
	return &collpb.ExportProfilesServiceRequest{
		ResourceProfiles: []*profpb.ResourceProfiles{{
			Resource: res,
			ScopeProfiles: []*profpb.ScopeProfiles{{
				Scope:    &commonpb.InstrumentationScope{Name: OTLPScopeName, Version: version},
				Profiles: profiles,
			}},
		}},
		Dictionary: b.dict,
	}
}

// CommandProcess returns the process that stands for the command: the
// newest image of the first process (a wrapper that execs the real
// program is the real program by then), nil if there is none.
func CommandProcess(c *capture.Capture) *capture.Process {
	if len(c.Processes) == 0 {
		return nil
	}
	pid := c.Processes[0].PID
	p := c.Processes[0]
	for _, q := range c.Processes {
		if q.PID == pid {
			p = q
		}
	}
	return p
}

// ProcessAttributes are the resource attributes of the command's process:
// process.pid, process.executable.name, process.command_line (only with
// cmdline: command lines may hold secrets) and, for CPython,
// process.runtime.name and process.runtime.version.
func ProcessAttributes(c *capture.Capture, cmdline bool) []KeyValue {
	p := CommandProcess(c)
	if p == nil {
		return nil
	}
	kv := []KeyValue{{AttrPID, int64(p.PID)}}
	if p.Exe != "" {
		kv = append(kv, KeyValue{AttrExeName, filepath.Base(p.Exe)})
	}
	if cmdline && len(p.Cmdline) > 0 {
		kv = append(kv, KeyValue{AttrCommandLine, strings.Join(p.Cmdline, " ")})
	}
	if p.Python != "" {
		kv = append(kv, KeyValue{AttrRuntimeName, "cpython"}, KeyValue{AttrRuntimeVer, p.Python})
	}
	return kv
}

func anyValue(v any) *commonpb.AnyValue {
	switch v := v.(type) {
	case int64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}
	case string:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}
	}
	panic("export: attribute value must be string or int64")
}

type attrKey struct {
	key string
	s   string
	i   int64
}

// otlpBuilder fills one dictionary; every table's entry 0 is the zero
// value, as the profiles spec requires, so that index 0 means "none".
type otlpBuilder struct {
	c      *capture.Capture
	dict   *profpb.ProfilesDictionary
	strs   map[string]int32
	attrs  map[attrKey]int32
	funcs  map[[2]string]int32
	maps   map[uint64]int32
	locs   map[uint64]int32
	stacks map[string]int32
	holes  map[string]int32
}

func (b *otlpBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(len(b.dict.StringTable))
	b.dict.StringTable = append(b.dict.StringTable, s)
	b.strs[s] = i
	return i
}

func (b *otlpBuilder) attr(key string, v any) int32 {
	k := attrKey{key: key}
	switch v := v.(type) {
	case int64:
		k.i = v
	case string:
		k.s = v
	}
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i := int32(len(b.dict.AttributeTable))
	b.dict.AttributeTable = append(b.dict.AttributeTable, &profpb.KeyValueAndUnit{KeyStrindex: b.str(key), Value: anyValue(v)})
	b.attrs[k] = i
	return i
}

func (b *otlpBuilder) function(name, file string) int32 {
	k := [2]string{name, file}
	if i, ok := b.funcs[k]; ok {
		return i
	}
	i := int32(len(b.dict.FunctionTable))
	b.dict.FunctionTable = append(b.dict.FunctionTable, &profpb.Function{NameStrindex: b.str(name), FilenameStrindex: b.str(file)})
	b.funcs[k] = i
	return i
}

func (b *otlpBuilder) mapping(id uint64) int32 {
	if i, ok := b.maps[id]; ok {
		return i
	}
	cm := b.c.Mappings[id]
	if cm == nil {
		return 0
	}
	m := &profpb.Mapping{MemoryStart: cm.Start, MemoryLimit: cm.Limit, FileOffset: cm.Offset, FilenameStrindex: b.str(cm.File)}
	if cm.BuildID != "" {
		m.AttributeIndices = []int32{b.attr(AttrBuildID, cm.BuildID)}
	}
	i := int32(len(b.dict.MappingTable))
	b.dict.MappingTable = append(b.dict.MappingTable, m)
	b.maps[id] = i
	return i
}

// placeholder is a location that only names what is missing, as in PProf.
func (b *otlpBuilder) placeholder(name string) int32 {
	if i, ok := b.holes[name]; ok {
		return i
	}
	i := int32(len(b.dict.LocationTable))
	b.dict.LocationTable = append(b.dict.LocationTable, &profpb.Location{Lines: []*profpb.Line{{FunctionIndex: b.function(name, "")}}})
	b.holes[name] = i
	return i
}

// location is PProf's location, typed: 0 when the capture has none.
func (b *otlpBuilder) location(id uint64) int32 {
	if i, ok := b.locs[id]; ok {
		return i
	}
	cl := b.c.Locations[id]
	if cl == nil {
		return 0
	}
	l := &profpb.Location{}
	switch cl.Kind {
	case capture.KindNative:
		l.Address = cl.Address
		l.MappingIndex = b.mapping(cl.MappingID)
		l.AttributeIndices = []int32{b.attr(AttrFrameType, frameTypeNative)}
	case capture.KindPython:
		l.AttributeIndices = []int32{b.attr(AttrFrameType, frameTypeCPython)}
	} // frames made up when reading (pool stitching, missing) have no type
	for _, ln := range cl.Lines {
		name := ln.Function
		if name == "" && cl.Kind == capture.KindNative {
			name = fmt.Sprintf("0x%x", cl.Address)
		}
		l.Lines = append(l.Lines, &profpb.Line{FunctionIndex: b.function(name, ln.File), Line: int64(ln.Line)})
	}
	i := int32(len(b.dict.LocationTable))
	b.dict.LocationTable = append(b.dict.LocationTable, l)
	b.locs[id] = i
	return i
}

// stack interns a capture stack, leaf first as in pprof.
func (b *otlpBuilder) stack(id uint64) int32 {
	var locs []int32
	if st := b.c.Stacks[id]; st == nil {
		locs = []int32{b.placeholder("<no stack>")}
	} else {
		for _, lid := range st.Locations {
			if l := b.location(lid); l != 0 {
				locs = append(locs, l)
			}
		}
		if len(locs) == 0 {
			locs = []int32{b.placeholder("<no frames>")}
		}
	}
	var key []byte
	for _, l := range locs {
		key = strconv.AppendInt(append(key, ','), int64(l), 10)
	}
	if i, ok := b.stacks[string(key)]; ok {
		return i
	}
	i := int32(len(b.dict.StackTable))
	b.dict.StackTable = append(b.dict.StackTable, &profpb.Stack{LocationIndices: locs})
	b.stacks[string(key)] = i
	return i
}

// sampleAttrs says which process, thread and memory kind made a sample.
func (b *otlpBuilder) sampleAttrs(s *heap.Sample) []int32 {
	var out []int32
	if pr := b.c.Process(s.Stream); pr != nil {
		out = append(out, b.attr(AttrPID, int64(pr.PID)))
		if pr.Exe != "" {
			out = append(out, b.attr(AttrExeName, filepath.Base(pr.Exe)))
		}
	}
	if s.TID != 0 {
		out = append(out, b.attr(AttrThreadID, int64(s.TID)))
	}
	if s.Func != heap.FuncMixed {
		out = append(out, b.attr(AttrMemoryKind, capture.MemKind(s.Func)))
	}
	if a := Attribution(b.c, s.StackID); a != "self" {
		out = append(out, b.attr(AttrAttribution, a))
	}
	return out
}

func (b *otlpBuilder) profile(typ, unit string, p *heap.Profile, start time.Time, d time.Duration, value func(*heap.Sample) float64) *profpb.Profile {
	out := &profpb.Profile{
		SampleType:   &profpb.ValueType{TypeStrindex: b.str(typ), UnitStrindex: b.str(unit)},
		PeriodType:   &profpb.ValueType{TypeStrindex: b.str(profileTypeMemory), UnitStrindex: b.str("bytes")},
		Period:       int64(max(b.c.Meta.Rate, 1)),
		TimeUnixNano: uint64(start.UnixNano()),
		DurationNano: uint64(max(d, 0)),
	}
	if p == nil {
		return out
	}
	for i := range p.Samples {
		s := &p.Samples[i]
		v := int64(math.Round(value(s)))
		if v == 0 {
			continue
		}
		out.Samples = append(out.Samples, &profpb.Sample{StackIndex: b.stack(s.StackID), AttributeIndices: b.sampleAttrs(s), Values: []int64{v}})
	}
	return out
}
