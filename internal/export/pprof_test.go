package export

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// pyCapture adds a stack of Python frames over native ones to testCapture.
func pyCapture() *capture.Capture {
	c := testCapture()
	c.Mappings[1].BuildID = "beef"
	c.Locations[20] = &capture.Location{ID: 20, Kind: capture.KindPython, Lines: []capture.Line{{Function: "Model.forward", File: "/app/pkg/model.py", Line: 12}}}
	c.Locations[21] = &capture.Location{ID: 21, Kind: capture.KindPython, Lines: []capture.Line{{Function: "<module>", File: "<string>", Line: 1}}}
	c.Stacks[4] = &capture.Stack{ID: 4, Locations: []uint64{10, 20, 21, 11}}
	c.Allocs = append(c.Allocs, capture.Alloc{Stream: 1, TID: 7, TimeNano: 4, Addr: 0x50, Size: 500, StackID: 4})
	return c
}

func TestPythonFrameLabels(t *testing.T) {
	c := pyCapture()
	got := StackFrames(c, 4)
	want := []string{"make_node (tree.c:42)", "build_tree (tree.c:80)", "Model.forward (/app/pkg/model.py:12)", "<module> (<string>:1)", "main (main.c:7)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestPProf(t *testing.T) {
	c := pyCapture()
	opt := heap.Options{ByThread: true}
	var buf bytes.Buffer
	if err := PProf(&buf, c, heap.Allocs(c, opt), heap.Leaks(c, opt)); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if got := strings.Join(types, " "); got != "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes" {
		t.Errorf("sample types %s", got)
	}
	if p.PeriodType.Type != "space" || p.PeriodType.Unit != "bytes" || p.Period != 1 || p.DefaultSampleType != "inuse_space" {
		t.Errorf("period %v %d default %q", p.PeriodType, p.Period, p.DefaultSampleType)
	}
	var py *profile.Sample
	for _, s := range p.Sample {
		if len(s.Location) == 4 {
			py = s
		}
	}
	if py == nil {
		t.Fatalf("no sample of the Python stack")
	}
	if py.Value[1] != 500 || py.Value[3] != 500 || py.Label["pid"][0] != "100" || py.NumLabel["thread_id"][0] != 7 {
		t.Errorf("values %v labels %v %v", py.Value, py.Label, py.NumLabel)
	}
	native, pyLoc := py.Location[0], py.Location[1]
	if native.Mapping == nil || native.Mapping.BuildID != "beef" || native.Mapping.File != "/usr/bin/app" || len(native.Line) != 2 ||
		native.Line[0].Function.Name != "make_node" || native.Line[1].Function.Name != "build_tree" {
		t.Errorf("native location %+v", native)
	}
	if pyLoc.Mapping != nil || pyLoc.Address != 0 || pyLoc.Line[0].Function.Name != "Model.forward" ||
		pyLoc.Line[0].Function.Filename != "/app/pkg/model.py" || pyLoc.Line[0].Line != 12 || pyLoc.Line[0].Function.SystemName != "" {
		t.Errorf("python location %+v %+v", pyLoc, pyLoc.Line[0].Function)
	}
}

func TestJSONAndSpeedscope(t *testing.T) {
	c := pyCapture()
	var buf bytes.Buffer
	p := heap.Peak(c, heap.Options{})
	if err := JSON(&buf, c, p, DocOptions{Timeline: heap.TimelineOf(c, heap.Options{})}); err != nil {
		t.Fatal(err)
	}
	var d Doc
	if err := json.Unmarshal(buf.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Schema != Schema || d.View != "peak" || d.At == nil || d.Timeline == nil || len(d.Processes) != 2 {
		t.Fatalf("doc header %+v", d)
	}
	kinds := map[string]bool{}
	for _, f := range d.Frames {
		kinds[f.Kind] = true
		if f.Kind == "python" && f.Module != "" {
			t.Errorf("python frame with a module: %+v", f)
		}
	}
	if !kinds["python"] || !kinds["native"] || !kinds["unknown"] {
		t.Errorf("frame kinds %v", kinds)
	}
	var sum int64
	for i, b := range d.Samples.Bytes {
		sum += b
		if d.Samples.Stack[i] >= len(d.Stacks) {
			t.Errorf("sample %d names stack %d of %d", i, d.Samples.Stack[i], len(d.Stacks))
		}
	}
	if float64(sum) != d.Total.Bytes {
		t.Errorf("samples sum to %d, total %v", sum, d.Total.Bytes)
	}
	buf.Reset()
	if err := Speedscope(&buf, c, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"$schema":"https://www.speedscope.app/file-format-schema.json"`) {
		t.Errorf("speedscope: %.200s", buf.String())
	}
}

func TestQueryErrors(t *testing.T) {
	c := pyCapture()
	for _, q := range []Query{{View: "nope"}, {View: "peak", Focus: "("}, {View: "peak", Hide: "["}, {View: "peak", PID: 9}} {
		if _, err := q.Compute(c); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
	r, err := Query{View: "peak", Hide: "^make_node"}.Compute(c)
	if err != nil {
		t.Fatal(err)
	}
	if f := StackFrames(r.Capture, 1); f[0] != "build_tree (tree.c:80)" {
		t.Errorf("hidden inlined frame remains: %q", f)
	}
	if f := StackFrames(c, 1); f[0] != "make_node (tree.c:42)" {
		t.Errorf("HideFrames changed the original capture: %q", f)
	}
}

// pprof takes the first mapping for the main binary: it is the first
// process's executable, whatever order the stacks met the mappings in, and
// one without addresses when no location lies in it.
func TestPProfMainMapping(t *testing.T) {
	tests := []struct {
		name, exe string
	}{
		{"executable with locations", "/usr/bin/app"},
		{"interpreter with none", "/usr/bin/python3.11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCapture()
			c.Processes[0].Exe = tt.exe
			// A stack whose first native frame is libc's.
			c.Locations[30] = &capture.Location{ID: 30, MappingID: 2, Address: 0x7f0000001000, Lines: []capture.Line{{Function: "malloc"}}}
			c.Stacks[30] = &capture.Stack{ID: 30, Locations: []uint64{30, 10, 11}}
			c.Allocs = append([]capture.Alloc{{Stream: 1, TID: 1, TimeNano: 1, Addr: 0x900, Size: 64, StackID: 30}}, c.Allocs...)
			opt := heap.Options{ByThread: true}
			p := buildPProf(c, heap.Allocs(c, opt), heap.Leaks(c, opt))
			if err := p.CheckValid(); err != nil {
				t.Fatal(err)
			}
			if len(p.Mapping) == 0 || p.Mapping[0].File != tt.exe || p.Mapping[0].ID != 1 {
				t.Fatalf("first mapping %+v, want %s", p.Mapping[0], tt.exe)
			}
			for i, m := range p.Mapping {
				if m.ID != uint64(i+1) {
					t.Errorf("mapping %d has ID %d", i, m.ID)
				}
			}
		})
	}
}

// Consecutive frames of a stripped module are one line; a lone one keeps
// its address, and frames of another module or with symbols break the run.
func TestStrippedFramesCollapse(t *testing.T) {
	c := testCapture()
	c.Mappings[9] = &capture.Mapping{ID: 9, Stream: 1, File: "/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so"}
	for i := uint64(0); i < 4; i++ {
		c.Locations[40+i] = &capture.Location{ID: 40 + i, MappingID: 9, Address: 0x7f0000000100 + i}
	}
	c.Locations[44] = &capture.Location{ID: 44, MappingID: 2, Address: 0x7f1000000000} // libc, no symbols
	c.Stacks[40] = &capture.Stack{ID: 40, Locations: []uint64{40, 41, 42, 44, 43, 11}}
	got := strings.Join(StackFrames(c, 40), " | ")
	want := "0x7f0000000100 and 2 more frames (_json.cpython-311-x86_64-linux-gnu.so) | 0x7f1000000000 (libc.so.6) | " +
		"0x7f0000000103 (_json.cpython-311-x86_64-linux-gnu.so) | main (main.c:7)"
	if got != want {
		t.Errorf("frames\n%s\nwant\n%s", got, want)
	}
}
