package export

import (
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// TestSummaryNothingSampled: a command that allocated nothing the sampler
// saw has a peak of 0 B with no moment — not one before the capture began.
func TestSummaryNothingSampled(t *testing.T) {
	c := capture.NewCapture()
	c.Meta = capture.Meta{Rate: 512 << 10, Command: []string{"true"}}
	c.Processes = []*capture.Process{{Stream: 1, PID: 100, Exe: "/usr/bin/true"}}
	c.RSS = []capture.RSS{{Stream: 1, TimeNano: 5e9, Bytes: 1 << 20}, {Stream: 1, TimeNano: 6e9, Bytes: 2 << 20}}
	rp := heap.NewReplay(c, heap.Options{})
	tl := rp.Timeline()
	var sum strings.Builder
	if err := Summary(&sum, c, rp.Summary(), SummaryOptions{Status: "exited with status 0", Capture: "x.hlc"}); err != nil {
		t.Fatal(err)
	}
	var view strings.Builder
	if err := TimelineText(&view, c, tl, rp); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"summary": sum.String(), "timeline": view.String()} {
		if !strings.Contains(out, "estimated heap (nothing sampled)") || strings.Contains(out, " at -") {
			t.Errorf("%s of an empty capture:\n%s", name, out)
		}
		if !strings.Contains(out, "2.0 MiB at 1.000 s") {
			t.Errorf("%s lost the RSS peak's moment:\n%s", name, out)
		}
	}
}

// Each kind of loss is named with the direction it biases the view.
func TestSkewNotesDirection(t *testing.T) {
	drops := map[uint32]heap.DropStats{1: {DroppedFrees: 3}}
	tests := []struct {
		view string
		want string // "" = no note
	}{
		{"allocs", ""},
		{"leaks", "leaks may be high"},
		{"live", "live may be high"},
		{"peak", "peak may be high"},
		{"temporary", "temporary may be low"},
	}
	for _, tt := range tests {
		got := strings.Join(skewNotes(&heap.Profile{View: tt.view, Drops: drops}), "|")
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s with dropped frees: %q, want %q", tt.view, got, tt.want)
		}
		got = strings.Join(skewNotes(&heap.Profile{View: tt.view, Drops: map[uint32]heap.DropStats{1: {DroppedAllocs: 2}}}), "|")
		if got != "2 allocation records dropped: estimates are low" {
			t.Errorf("%s with dropped allocations: %q", tt.view, got)
		}
	}
}

// A summary's site is the innermost frame of the user's own code, with the
// leaf beside it when that is a helper of the interpreter, the standard
// library or a package.
func TestUserFrame(t *testing.T) {
	c := capture.NewCapture()
	c.Processes = []*capture.Process{{Stream: 1, PID: 1, Exe: "/usr/bin/python3.11", Python: "3.11.2"}}
	c.Mappings[1] = &capture.Mapping{ID: 1, Stream: 1, File: "/usr/bin/python3.11"}
	c.Mappings[2] = &capture.Mapping{ID: 2, Stream: 1, File: "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	c.Mappings[3] = &capture.Mapping{ID: 3, Stream: 1, File: "/srv/app/venv/lib/python3.11/site-packages/ujson.cpython-311-x86_64-linux-gnu.so"}
	c.Mappings[4] = &capture.Mapping{ID: 4, Stream: 1, File: "/srv/app/libmine.so"}
	py := func(id uint64, fn, file string, line int) {
		c.Locations[id] = &capture.Location{ID: id, Kind: capture.KindPython, Lines: []capture.Line{{Function: fn, File: file, Line: line}}}
	}
	native := func(id, mapping uint64, fn string) {
		c.Locations[id] = &capture.Location{ID: id, MappingID: mapping, Address: 0x1000 + id, Lines: []capture.Line{{Function: fn}}}
	}
	native(1, 2, "malloc")
	native(2, 1, "PyObject_Malloc")
	py(3, "JSONDecoder.raw_decode", "/usr/lib/python3.11/json/decoder.py", 353)
	py(4, "load_cache", "/srv/app/cache.py", 12)
	py(5, "<module>", "/srv/app/main.py", 3)
	native(6, 3, "ujson_loads")
	py(7, "_call_with_frames_removed", "<frozen importlib._bootstrap>", 241)
	native(8, 4, "mine_alloc")
	py(9, "tool", "/home/u/lib/python_tools/t.py", 5)
	tests := []struct {
		stack []uint64
		want  string
	}{
		{[]uint64{1, 2, 3, 4, 5}, "load_cache (/srv/app/cache.py:12) | malloc (libc.so.6)"},
		{[]uint64{4, 5}, "load_cache (/srv/app/cache.py:12) | "},
		{[]uint64{6, 7, 5}, "<module> (/srv/app/main.py:3) | ujson_loads (ujson.cpython-311-x86_64-linux-gnu.so)"},
		{[]uint64{10, 7, 5}, "<module> (/srv/app/main.py:3) | ujson.cpython-311-x86_64-linux-gnu.so"},
		{[]uint64{1, 8, 5}, "mine_alloc (libmine.so) | malloc (libc.so.6)"},
		{[]uint64{9}, "tool (/home/u/lib/python_tools/t.py:5) | "},
		{[]uint64{1, 2, 3}, "malloc (libc.so.6) | "}, // nothing of the user's: the leaf
	}
	c.Locations[10] = &capture.Location{ID: 10, MappingID: 3, Address: 0x7f00beef} // stripped
	for i, tt := range tests {
		id := uint64(100 + i)
		c.Stacks[id] = &capture.Stack{ID: id, Locations: tt.stack}
		if user, leaf := UserFrame(c, id); user+" | "+leaf != tt.want {
			t.Errorf("stack %v: %q, want %q", tt.stack, user+" | "+leaf, tt.want)
		}
	}
}

// A stack with no frames (a fork child that could not unwind) is a site of
// its own, not a crash.
func TestUserFrameEmptyStack(t *testing.T) {
	c := capture.NewCapture()
	c.Stacks[1] = &capture.Stack{ID: 1}
	if user, leaf := UserFrame(c, 1); user != "<no frames>" || leaf != "" {
		t.Errorf("empty stack: %q via %q", user, leaf)
	}
	if f := StackFrames(c, 1); len(f) != 1 || f[0] != "<no frames>" {
		t.Errorf("StackFrames of an empty stack: %q", f)
	}
}

// Rows say which hooked function their allocations went through, when it
// is not plain malloc; JSON names it on every row.
func TestRowsNameTheirFunction(t *testing.T) {
	c := capture.NewCapture()
	c.Meta.Rate = 1
	c.Processes = []*capture.Process{{Stream: 1, PID: 1}}
	c.Locations[1] = &capture.Location{ID: 1, Lines: []capture.Line{{Function: "f", File: "f.c", Line: 1}}}
	c.Locations[2] = &capture.Location{ID: 2, Lines: []capture.Line{{Function: "g", File: "g.c", Line: 2}}}
	c.Stacks[1] = &capture.Stack{ID: 1, Locations: []uint64{1}}
	c.Stacks[2] = &capture.Stack{ID: 2, Locations: []uint64{2}}
	c.Allocs = []capture.Alloc{
		{Stream: 1, TimeNano: 1, Addr: 0x10, Size: 100, StackID: 1, Func: capture.FuncCalloc},
		{Stream: 1, TimeNano: 2, Addr: 0x20, Size: 50, StackID: 2, Func: capture.FuncMalloc},
		{Stream: 1, TimeNano: 3, Addr: 0x30, Size: 50, StackID: 2, Func: capture.FuncRealloc},
	}
	p := heap.Allocs(c, heap.Options{})
	var buf strings.Builder
	if err := Text(&buf, c, p, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "1 samples  by calloc\n") || strings.Count(buf.String(), "  by ") != 1 {
		t.Errorf("text rows:\n%s", buf.String())
	}
	var js strings.Builder
	if err := JSON(&js, c, p, DocOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"func":["calloc",""]`) {
		t.Errorf("JSON func column: %s", js.String())
	}
}

// A capture too large to summarise with the memory free still gets the
// command's end, the reason, and where the capture is.
func TestSummaryTooLarge(t *testing.T) {
	var b strings.Builder
	cmd := []string{"python3", "-c", strings.Repeat("x", 80)}
	if err := SummaryTooLarge(&b, cmd, "exited with status 3", "/tmp/big.hlc", 40_000_000, 4_000_000_000, 3_000_000_000); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"heaplens: python3 -c xxx", "... exited with status 3\n",
		"40000000 sampled allocations and frees: summarising them would take about 3.7 GiB of memory, more than half of the 2.8 GiB free now",
		"  capture: /tmp/big.hlc\n", "heaplens report /tmp/big.hlc --view peak", "heaplens serve /tmp/big.hlc\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
