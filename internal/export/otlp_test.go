package export

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	commonpb "go.opentelemetry.io/proto/slim/otlp/common/v1"

	"github.com/heaplens/heaplens/internal/heap"
)

// TestOTLPMatchesPProf checks that the OTLP profiles hold what our pprof
// holds, sample for sample: the same frames (function, file, line), the
// same process and thread, the same four values.
func TestOTLPMatchesPProf(t *testing.T) {
	c := pyCapture()
	opt := heap.Options{ByThread: true}
	alloc, inuse := heap.Allocs(c, opt), heap.Leaks(c, opt)
	var buf bytes.Buffer
	if err := PProf(&buf, c, alloc, inuse); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][4]int64{}
	for _, s := range pp.Sample {
		var frames []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				frames = append(frames, fmt.Sprintf("%s %s:%d", ln.Function.Name, ln.Function.Filename, ln.Line))
			}
		}
		k := fmt.Sprintf("pid=%s tid=%v %s", s.Label["pid"][0], s.NumLabel["thread_id"], strings.Join(frames, "|"))
		v := want[k]
		for i := range v {
			v[i] += s.Value[i]
		}
		want[k] = v
	}

	start := time.Unix(10, 0)
	req := OTLPProfiles(c, alloc, inuse, start, 15*time.Second, []KeyValue{{AttrServiceName, "svc"}}, "v")
	d := req.Dictionary
	// Every table starts with its zero value, so that index 0 means none.
	if d.StringTable[0] != "" || len(d.MappingTable[0].String()) != 0 || len(d.LocationTable[0].String()) != 0 ||
		len(d.FunctionTable[0].String()) != 0 || len(d.AttributeTable[0].String()) != 0 || len(d.StackTable[0].String()) != 0 {
		t.Errorf("a dictionary table does not start with its zero value")
	}
	str := func(i int32) string { return d.StringTable[i] }
	profiles := req.ResourceProfiles[0].ScopeProfiles[0].Profiles
	got := map[string][4]int64{}
	types := map[string]bool{}
	for i, p := range profiles {
		if p.TimeUnixNano != uint64(start.UnixNano()) || p.DurationNano != uint64(15*time.Second) || p.Period != 1 ||
			str(p.PeriodType.TypeStrindex) != "space" || str(p.PeriodType.UnitStrindex) != "bytes" {
			t.Errorf("profile %d: window %d+%d, period %d", i, p.TimeUnixNano, p.DurationNano, p.Period)
		}
		for _, s := range p.Samples {
			attrs := map[string]*commonpb.AnyValue{}
			for _, a := range s.AttributeIndices {
				attrs[str(d.AttributeTable[a].KeyStrindex)] = d.AttributeTable[a].Value
			}
			tid := "[]"
			if v, ok := attrs[AttrThreadID]; ok {
				tid = fmt.Sprintf("[%d]", v.GetIntValue())
			}
			var frames []string
			for _, li := range d.StackTable[s.StackIndex].LocationIndices {
				loc := d.LocationTable[li]
				typ := ""
				for _, a := range loc.AttributeIndices {
					if str(d.AttributeTable[a].KeyStrindex) == AttrFrameType {
						typ = d.AttributeTable[a].Value.GetStringValue()
					}
				}
				if (typ == "native") != (loc.MappingIndex != 0 || loc.Address != 0) || (typ == "cpython" && loc.MappingIndex != 0) {
					t.Errorf("location %d: frame type %q, mapping %d, address %#x", li, typ, loc.MappingIndex, loc.Address)
				}
				for _, ln := range loc.Lines {
					f := d.FunctionTable[ln.FunctionIndex]
					frames = append(frames, fmt.Sprintf("%s %s:%d", str(f.NameStrindex), str(f.FilenameStrindex), ln.Line))
					if str(f.NameStrindex) == "Model.forward" && typ != "cpython" {
						t.Errorf("Model.forward is a %q frame", typ)
					}
				}
			}
			k := fmt.Sprintf("pid=%d tid=%s %s", attrs[AttrPID].GetIntValue(), tid, strings.Join(frames, "|"))
			v := got[k]
			v[i] += s.Values[0]
			got[k] = v
		}
		types[str(p.SampleType.TypeStrindex)+"/"+str(p.SampleType.UnitStrindex)] = true
	}
	if len(types) != 4 || !types["alloc_objects/count"] || !types["alloc_space/bytes"] || !types["inuse_objects/count"] || !types["inuse_space/bytes"] {
		t.Errorf("sample types %v", types)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: OTLP %v, pprof %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: OTLP %v, not in pprof", k, v)
		}
	}
}
