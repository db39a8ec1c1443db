package export

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/heap"
)

func TestQuerySet(t *testing.T) {
	tests := []struct {
		name, value string
		check       func(q Query) bool
		err         string
	}{
		{"view", "temporary", func(q Query) bool { return q.View == "temporary" }, ""},
		{"view", "heap", nil, `view: unknown view "heap"`},
		{"at", "1.5s", func(q Query) bool { return q.At == 1500*time.Millisecond }, ""},
		{"at", "-1s", nil, "at: must not be negative"},
		{"lifetime", "250ms", func(q Query) bool { return q.Lifetime == 250*time.Millisecond }, ""},
		{"min-age", "2m", func(q Query) bool { return q.MinAge == 2*time.Minute }, ""},
		{"min-age", "soon", nil, "min-age: time: invalid duration"},
		{"pid", "4242", func(q Query) bool { return q.PID == 4242 }, ""},
		{"pid", "0", nil, "pid: must be positive"},
		{"thread", "77", func(q Query) bool { return q.Thread == 77 }, ""},
		{"thread", "4294967296", nil, "thread: "},
		{"focus", "^main", func(q Query) bool { return q.Focus == "^main" }, ""},
		{"hide", "malloc", func(q Query) bool { return q.Hide == "malloc" }, ""},
		{"rate", "1", nil, `unknown parameter "rate"`},
	}
	for _, tt := range tests {
		q := NewQuery("leaks")
		err := q.Set(tt.name, tt.value)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Set(%s, %s) = %v, want an error with %q", tt.name, tt.value, err, tt.err)
		case tt.err == "" && (err != nil || !tt.check(q)):
			t.Errorf("Set(%s, %s) = %v, query %+v", tt.name, tt.value, err, q)
		}
	}
}

// URL parameters and flags share the names; absent ones keep the defaults.
func TestParseQuery(t *testing.T) {
	params := map[string]string{"view": "live", "at": "2s", "pid": "9", "min-age": ""}
	q, err := ParseQuery("peak", func(n string) string { return params[n] })
	if err != nil || q.View != "live" || q.At != 2*time.Second || q.PID != 9 || q.MinAge != 0 || q.Lifetime != 0 {
		t.Errorf("ParseQuery = %+v, %v", q, err)
	}
	q, err = ParseQuery("peak", func(string) string { return "" })
	if err != nil || q.View != "peak" || q.At != AtEnd {
		t.Errorf("defaults: %+v, %v", q, err)
	}
	if _, err := ParseQuery("peak", func(n string) string { return map[string]string{"at": "x"}[n] }); err == nil {
		t.Error("a bad duration was accepted")
	}
}

func TestFormats(t *testing.T) {
	for _, name := range []string{"text", "folded", "pprof", "speedscope", "json"} {
		if LookupFormat(name) == nil || !strings.Contains(FormatNames(), name) {
			t.Errorf("format %s is not listed", name)
		}
	}
	if err := Write(&bytes.Buffer{}, "svg", nil, WriteOptions{}); err == nil || !strings.Contains(err.Error(), `unknown format "svg"`) {
		t.Errorf("unknown format: %v", err)
	}
}

// The allocs view in pprof is Go's heap profile at exit: alloc_* are the
// allocations, inuse_* what was still live at the end (the leaks view).
func TestPProfAllocsHasLeaksInuse(t *testing.T) {
	c := testCapture()
	q := NewQuery("allocs")
	q.ByThread = true
	r, err := q.Compute(c)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, "pprof", r, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var alloc, inuse int64
	for _, s := range p.Sample {
		alloc += s.Value[1]
		inuse += s.Value[3]
	}
	// 3000+1000+2048+0+10 allocated; the 1000 freed.
	if want := heap.Leaks(c, heap.Options{}).TotalBytes; alloc != 6058 || float64(inuse) != want || want != 5058 {
		t.Errorf("alloc_space %d, inuse_space %d; want 6058 and %.0f (5058)", alloc, inuse, want)
	}
	if p.DefaultSampleType != "alloc_space" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
}
