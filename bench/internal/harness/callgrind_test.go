package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleCallgrind is the head and tail of a real callgrind 3.19 output file.
const sampleCallgrind = `# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 8256
cmd:  ./malloc_pairs 128 200000 1
part: 1

desc: I1 cache: 
desc: Timerange: Basic block 0 - 6850103
desc: Trigger: Program termination

positions: line
events: Ir
summary: 31003582

ob=(1) /work/main/internal/launch/libheaplens.so
fl=(1) /work/main/preload/heaplens.c
fn=(1) malloc
753 1399999
cfn=(2) malloc
calls=200000 0
753 8200008

totals: 31003582
`

func TestCallgrindTotals(t *testing.T) {
	got, err := CallgrindTotals(strings.NewReader(sampleCallgrind))
	if err != nil || got != 31003582 {
		t.Errorf("CallgrindTotals = %d, %v; want 31003582", got, err)
	}
	// Without a totals line the summary line is used.
	noTotals := strings.Replace(sampleCallgrind, "totals: 31003582", "", 1)
	noTotals = strings.Replace(noTotals, "summary: 31003582", "summary: 42 7", 1)
	if got, err := CallgrindTotals(strings.NewReader(noTotals)); err != nil || got != 42 {
		t.Errorf("summary fallback = %d, %v; want 42", got, err)
	}
	if _, err := CallgrindTotals(strings.NewReader("events: Ir\n")); err == nil {
		t.Error("no error for a file without totals")
	}
}

// The file is also read from disk once, as the harness does.
func TestCallgrindFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "callgrind.out")
	if err := os.WriteFile(p, []byte(sampleCallgrind), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := CallgrindFile(p); err != nil || got != 31003582 {
		t.Errorf("CallgrindFile = %d, %v", got, err)
	}
}

// Self costs per object: a call's inclusive cost line is the callee's, the
// compressed "(N)" names of ob= and cob= are one namespace, and the total
// over objects is the file's.
func TestCallgrindObjects(t *testing.T) {
	const file = `events: Ir
positions: line
ob=(1) /lib/libheaplens.so
fl=(1) hooks.c
fn=(1) malloc
10 100
cob=(2) /usr/bin/python3.11
cfn=(2) pymalloc
calls=5 0
+2 700
+1 20
ob=(2)
fn=(2)
0 700
ob=(3) /lib/libc.so.6
fn=(3) memcpy
* 30
totals: 850
`
	got, err := CallgrindObjects(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"/lib/libheaplens.so": 120, "/usr/bin/python3.11": 700, "/lib/libc.so.6": 30}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	// Two positions (instr line): the cost is the third field.
	two := "positions: instr line\nob=(1) a\nfn=(1) f\n0x10 3 40\n"
	if got, err := CallgrindObjects(strings.NewReader(two)); err != nil || got["a"] != 40 {
		t.Errorf("two positions: %v, %v", got, err)
	}
	if _, err := CallgrindObjects(strings.NewReader("ob=(1) a\n5 x\n")); err == nil {
		t.Error("no error for a bad cost")
	}
}
