package export

import (
	"bytes"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// testCapture has two processes, mappings with and without files, locations
// with source lines, inlined lines, only a function, nothing, a dangling
// mapping, and stacks that reference a missing location.
func testCapture() *capture.Capture {
	c := capture.NewCapture()
	c.Meta = capture.Meta{Rate: 1, Command: []string{"./app", "--n", "3"}}
	c.Processes = []*capture.Process{
		{Stream: 1, PID: 100, Cmdline: []string{"/usr/bin/app", "--n", "3"}, Exe: "/usr/bin/app"},
		{Stream: 2, PID: 101, Exe: "/opt/bin/worker;x"},
	}
	c.Mappings[1] = &capture.Mapping{ID: 1, Stream: 1, File: "/usr/bin/app"}
	c.Mappings[2] = &capture.Mapping{ID: 2, Stream: 1, File: "/lib/x86_64-linux-gnu/libc.so.6"}
	c.Locations[10] = &capture.Location{ID: 10, MappingID: 1, Address: 0x401000, Lines: []capture.Line{
		{Function: "make_node", File: "/src/tree.c", Line: 42},
		{Function: "build_tree", File: "/src/tree.c", Line: 80},
	}}
	c.Locations[11] = &capture.Location{ID: 11, MappingID: 1, Address: 0x402000, Lines: []capture.Line{
		{Function: "main", File: "/src/main.c", Line: 7},
	}}
	c.Locations[12] = &capture.Location{ID: 12, MappingID: 2, Address: 0x7f00aa, Lines: []capture.Line{
		{Function: "__libc_start_main"},
	}}
	c.Locations[13] = &capture.Location{ID: 13, MappingID: 2, Address: 0x7F00BEEF}
	c.Locations[14] = &capture.Location{ID: 14, Address: 0xdead}
	c.Locations[15] = &capture.Location{ID: 15, MappingID: 99, Address: 0x10, Lines: []capture.Line{
		{Function: "operator<<(std::ostream&; int)", Line: 3},
	}}
	c.Stacks[1] = &capture.Stack{ID: 1, Locations: []uint64{10, 11, 12}}
	c.Stacks[2] = &capture.Stack{ID: 2, Locations: []uint64{13, 14, 77}}
	c.Stacks[3] = &capture.Stack{ID: 3, Locations: []uint64{15}}
	c.Allocs = []capture.Alloc{
		{Stream: 1, TimeNano: 1, Addr: 0x10, Size: 3000, StackID: 1},
		{Stream: 1, TimeNano: 2, Addr: 0x20, Size: 1000, StackID: 1},
		{Stream: 2, TimeNano: 1, Addr: 0x10, Size: 2048, StackID: 2},
		{Stream: 2, TimeNano: 2, Addr: 0x30, Size: 0, StackID: 3},
		{Stream: 1, TimeNano: 3, Addr: 0x40, Size: 10, StackID: 5},
	}
	c.Frees = []capture.Free{{Stream: 1, TimeNano: 5, Addr: 0x20}, {Stream: 2, TimeNano: 5, Addr: 0x99}}
	c.FreeOrder = []int32{5, 5}
	c.Ends[1] = &capture.End{Stream: 1, Known: true, ExitCode: 0}
	c.Ends[2] = &capture.End{Stream: 2, Known: true, Signaled: true, Signal: 9, DroppedAllocs: 2, DroppedFrees: 1, LostBytes: 64}
	c.Resolve() // as reading does: location 77 and stack 5 are dangling
	return c
}

func TestStackFrames(t *testing.T) {
	c := testCapture()
	tests := []struct {
		stack uint64
		want  []string
	}{
		{1, []string{"make_node (tree.c:42)", "build_tree (tree.c:80)", "main (main.c:7)", "__libc_start_main (libc.so.6)"}},
		{2, []string{"0x7f00beef (libc.so.6)", "0xdead (?)", "<unknown location 77>"}},
		{3, []string{"operator<<(std::ostream&; int) (?)"}},
		{0, []string{"<no stack>"}},
		{9, []string{"<no stack>"}}, // named by nothing
	}
	for _, tt := range tests {
		got := StackFrames(c, tt.stack)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("StackFrames(%d) =\n%q\nwant\n%q", tt.stack, got, tt.want)
		}
	}
}

func TestProcessLabel(t *testing.T) {
	c := testCapture()
	c.Processes = append(c.Processes, &capture.Process{Stream: 3, PID: 102})
	for stream, want := range map[uint32]string{1: "[100 app]", 2: "[101 worker;x]", 3: "[102]", 4: "[? stream 4]"} {
		if got := ProcessLabel(c, stream); got != want {
			t.Errorf("ProcessLabel(%d) = %q, want %q", stream, got, want)
		}
	}
}

func TestFolded(t *testing.T) {
	c := testCapture()
	tests := []struct {
		name string
		p    *heap.Profile
		want string
	}{
		{"allocs", heap.Allocs(c, heap.Options{}), "" +
			"[100 app];__libc_start_main (libc.so.6);main (main.c:7);build_tree (tree.c:80);make_node (tree.c:42) 4000\n" +
			"[101 worker:x];<unknown location 77>;0xdead (?);0x7f00beef (libc.so.6) 2048\n" +
			"[100 app];<unknown stack 5> 10\n"},
		// Stack 3 has 0 bytes and is left out.
		{"leaks stream 1", heap.Leaks(c, heap.Options{Streams: []uint32{1}}), "" +
			"[100 app];__libc_start_main (libc.so.6);main (main.c:7);build_tree (tree.c:80);make_node (tree.c:42) 3000\n" +
			"[100 app];<unknown stack 5> 10\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Folded(&buf, c, tt.p); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", buf.String(), tt.want)
			}
		})
	}
}

func TestFoldedRounding(t *testing.T) {
	c := testCapture()
	p := &heap.Profile{Samples: []heap.Sample{
		{Stream: 1, StackID: 1, Bytes: 2.5},
		{Stream: 1, StackID: 3, Bytes: 0.49},
	}}
	var buf bytes.Buffer
	Folded(&buf, c, p)
	if want := "[100 app];__libc_start_main (libc.so.6);main (main.c:7);build_tree (tree.c:80);make_node (tree.c:42) 3\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

// inOrder fails unless each of want appears in got, each after the one
// before.
func inOrder(t *testing.T, got string, want []string) {
	t.Helper()
	rest := got
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("report lacks %q (or has it before %q):\n%s", w, rest[:min(len(rest), 40)], got)
			return
		}
		rest = rest[i+len(w):]
	}
}

// The text report of testCapture, fact by fact. Its allocations: stack 1
// (make_node…main) 3000 + 1000 bytes, the second freed; stack 2 (stream 2,
// with the dangling location 77) 2048; stack 3 (stream 2) 0 bytes; the
// dangling stack 5: 10 bytes. Stream 2 was killed and lost 2 allocs, 1 free
// and 64 ring bytes; its one free matches nothing.
func TestText(t *testing.T) {
	c := testCapture()
	stack1 := "      make_node (tree.c:42)\n      build_tree (tree.c:80)\n      main (main.c:7)\n      __libc_start_main (libc.so.6)\n"
	stack2 := "      0x7f00beef (libc.so.6)\n      0xdead (?)\n      <unknown location 77>\n"
	damaged := []string{
		"note:      damaged capture: 1 allocs name an unknown stack (e.g. alloc 4, stack 5); shown as placeholders\n",
		"note:      damaged capture: 1 locations name an unknown mapping (e.g. location 15, mapping 99); shown as placeholders\n",
		"note:      damaged capture: 1 stacks name an unknown location (e.g. stack 2, location 77); shown as placeholders\n",
	}
	tests := []struct {
		name    string
		p       *heap.Profile
		opt     TextOptions
		want    []string // in this order
		wantNot []string
	}{
		{"allocs top 2", heap.Allocs(c, heap.Options{}), TextOptions{Top: 2}, append(append([]string{
			"view:      allocs\ncommand:   ./app --n 3\nrate:      1 B (every allocation sampled: values are exact)\n",
			"processes: 2\n  [100 app] stream 1, exited 0; dropped: 0\n",
			"  [101 worker;x] stream 2, killed by signal 9; dropped: 2 alloc records, 1 free records, 64 lost ring bytes\n",
			"total:     5.9 KiB (6058 bytes), 5 objects, 5 samples\n", // 3000+1000+2048+0+10
		}, damaged...),
			"note:      2 allocation records dropped: estimates are low\n",
			"top 2 of 4 stacks by estimated bytes:\n",
			"#1  3.9 KiB (4000 bytes)  2 objects  66.0%  [100 app]  2 samples\n"+stack1, // 4000/6058
			"#2  2.0 KiB (2048 bytes)  1 objects  33.8%  [101 worker;x]  1 samples\n"+stack2,
		), []string{"#3", "free records dropped", "estimates:"}},
		{"leaks stream 1", heap.Leaks(c, heap.Options{Streams: []uint32{1}}), TextOptions{}, []string{
			"view:      leaks\n",
			"processes: 1\n  [100 app] stream 1, exited 0; dropped: 0\n",
			"total:     2.9 KiB (3010 bytes), 2 objects, 2 samples\n", // the 1000 were freed
			"top 2 of 2 stacks by estimated bytes:\n",
			"#1  2.9 KiB (3000 bytes)  1 objects  99.7%  [100 app]  1 samples\n" + stack1,
			"#2  10 B (10 bytes)  1 objects  0.3%  [100 app]  1 samples\n      <unknown stack 5>\n",
		}, []string{"worker", "records dropped"}},
		{"leaks stream 2", heap.Leaks(c, heap.Options{Streams: []uint32{2}}), TextOptions{Top: -1}, []string{
			"total:     2.0 KiB (2048 bytes), 2 objects, 2 samples\n",
			"note:      1 free records dropped: freed blocks count as live, leaks may be high\n",
			"note:      1 frees matched no sampled allocation (dropped, or made before profiling): ignored\n",
			"#1  2.0 KiB (2048 bytes)  1 objects  100.0%  [101 worker;x]  1 samples\n" + stack2,
			"#2  0 B (0 bytes)  1 objects  0.0%  [101 worker;x]  1 samples\n      operator<<(std::ostream&; int) (?)\n",
		}, []string{"[100 app] stream"}},
		{"empty", &heap.Profile{View: "allocs", Rate: 512 << 10}, TextOptions{}, []string{
			"rate:      512 KiB (mean bytes between samples)\n",
			"estimates: each sampled allocation of s bytes stands for 1/(1-(1-1/rate)^s) allocations; ± is a 95 % interval computed from the samples\n",
			"  [100 app] stream 1, exited 0; dropped: unknown\n", // a profile without Drops
			"total:     0 B ± 0 B (0 bytes), 0 objects, 0 samples\n",
			"\nno samples\n",
		}, []string{"#1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Text(&buf, c, tt.p, tt.opt); err != nil {
				t.Fatal(err)
			}
			inOrder(t, buf.String(), tt.want)
			for _, w := range tt.wantNot {
				if strings.Contains(buf.String(), w) {
					t.Errorf("report has %q:\n%s", w, buf.String())
				}
			}
		})
	}
}

// Processes that sampled nothing are one line, by command: a shell
// pipeline's helpers do not push the stacks off the screen.
func TestTextQuietProcesses(t *testing.T) {
	c := testCapture()
	for i := 0; i < 78; i++ {
		c.Processes = append(c.Processes, &capture.Process{Stream: uint32(10 + i), PID: 200 + i, Cmdline: []string{"bash"}})
	}
	c.Processes = append(c.Processes, &capture.Process{Stream: 99, PID: 300, Exe: "/usr/bin/sed"})
	var buf bytes.Buffer
	if err := Text(&buf, c, heap.Allocs(c, heap.Options{}), TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "processes: 81\n") || !strings.Contains(out, "  79 more with no samples: bash ×78, sed ×1\n") ||
		strings.Contains(out, "[200 bash]") || !strings.Contains(out, "[100 app] stream 1") {
		t.Errorf("process list:\n%s", out)
	}
}

func TestTextProcessStates(t *testing.T) {
	c := testCapture()
	c.Processes = append(c.Processes,
		&capture.Process{Stream: 3, PID: 102, Exe: "/bin/sh"},
		&capture.Process{Stream: 4, PID: 102, Exe: "/bin/ls"},
		&capture.Process{Stream: 5, PID: 103, Exe: "/bin/x"})
	c.Ends[3] = &capture.End{Stream: 3, Exec: true}
	c.Ends[4] = &capture.End{Stream: 4}
	for s := uint32(3); s <= 5; s++ { // one sample each: processes without any are summed up in one line
		c.Allocs = append(c.Allocs, capture.Alloc{Stream: s, TimeNano: 9, Addr: 0x500, Size: 8, StackID: 1})
	}
	var buf bytes.Buffer
	if err := Text(&buf, c, heap.Allocs(c, heap.Options{}), TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  [102 sh] stream 3, replaced by exec; dropped: 0\n",
		"  [102 ls] stream 4, ended without exit() (_exit or a signal); status unknown; dropped: 0\n",
		"  [103 x] stream 5, no end record (capture cut short); dropped: unknown\n",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}
