package export

import (
	"fmt"
	"io"
	"strings"
)

// Format is one output format of a computed Query.
type Format struct {
	Name  string
	Usage string
	// NeedsFile is set for formats that are not read on a terminal: a
	// command writes them to a named file only.
	NeedsFile bool
	// ByThread asks the Query for one sample per thread (pprof labels).
	ByThread bool
	Write    func(w io.Writer, r *Result, opt WriteOptions) error
}

// WriteOptions tune the formats that take options.
type WriteOptions struct {
	Top int // text: stacks shown; 0 means 20, negative means all
}

// formats lists every format once, in the order help shows them.
var formats = []*Format{
	{Name: "text", Usage: "a header and the top stacks, for people", Write: func(w io.Writer, r *Result, opt WriteOptions) error {
		if r.Profile.View == "timeline" {
			return TimelineText(w, r.Capture, r.Timeline(), r.Replay())
		}
		return Text(w, r.Capture, r.Profile, TextOptions{Top: opt.Top})
	}},
	{Name: "folded", Usage: "folded stacks (flamegraph.pl, inferno, speedscope)", Write: func(w io.Writer, r *Result, _ WriteOptions) error {
		return Folded(w, r.Capture, r.Profile)
	}},
	{Name: "pprof", Usage: "Go's heap profile shape, for go tool pprof and fleet profilers", ByThread: true, Write: writePProf},
	{Name: "speedscope", Usage: "speedscope's JSON file format", Write: func(w io.Writer, r *Result, _ WriteOptions) error {
		return Speedscope(w, r.Capture, r.Profile)
	}},
	{Name: "json", Usage: "the JSON document of docs/json-format.md", Write: func(w io.Writer, r *Result, _ WriteOptions) error {
		return JSON(w, r.Capture, r.Profile, DocOptions{Timeline: r.Timeline(), Filter: r.Filter})
	}},
}

// writePProf writes Go's heap profile shape: alloc_* from the allocs view,
// inuse_* from the view asked for; for allocs itself, inuse_* is what was
// live at the end (leaks), as Go's heap profile at exit shows.
func writePProf(w io.Writer, r *Result, _ WriteOptions) error {
	inuse := r.Profile
	if r.Profile.View == "allocs" {
		inuse = r.Replay().Leaks(r.opt)
		inuse.View = "allocs"
	}
	return PProf(w, r.Capture, r.Allocs(), inuse)
}

// RegisterFormat adds a format defined outside this package (the HTML page
// lives with the web UI's assets). It panics on a duplicate name, which is
// a programming error.
func RegisterFormat(f *Format) {
	if LookupFormat(f.Name) != nil {
		panic("export: format " + f.Name + " registered twice")
	}
	formats = append(formats, f)
}

// LookupFormat returns the format of that name, or nil.
func LookupFormat(name string) *Format {
	for _, f := range formats {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// FormatNames lists the formats' names, for help and errors.
func FormatNames() string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// Write writes r in the named format.
func Write(w io.Writer, format string, r *Result, opt WriteOptions) error {
	f := LookupFormat(format)
	if f == nil {
		return fmt.Errorf("unknown format %q (%s)", format, FormatNames())
	}
	return f.Write(w, r, opt)
}
