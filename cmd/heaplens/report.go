package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/stack"
	"github.com/heaplens/heaplens/internal/web"
)

// parseInterspersed lets flags come after positional arguments, as in
// `heaplens report CAPTURE --view leaks`.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// queryFlags registers the named Query parameters (all when none are
// named) as flags, parsed by the Query itself as the web UI's URL
// parameters are.
func queryFlags(fs *flag.FlagSet, q *export.Query, names ...string) {
	for _, p := range export.QueryParams {
		if len(names) > 0 && !slices.Contains(names, p.Name) {
			continue
		}
		usage := p.Usage
		if p.Name == "view" {
			usage += " (default " + q.View + ")"
		}
		fs.Func(p.Name, usage, func(v string) error { return q.Set(p.Name, v) })
	}
}

// loadCapture loads a capture, reporting damage on stderr. ok is false when
// nothing usable was read.
func loadCapture(path, cmd string, stderr io.Writer) (c *capture.Capture, corrupt bool, ok bool) {
	c, err := capture.Load(path)
	var ce *capture.CorruptError
	if err != nil && !errors.As(err, &ce) {
		fmt.Fprintf(stderr, "heaplens %s: %v\n", cmd, err)
		return nil, false, false
	}
	if ce != nil {
		fmt.Fprintf(stderr, "heaplens %s: %v; reporting what is valid before the damage\n", cmd, ce)
	}
	stack.Stitch(c)
	return c, ce != nil, true
}

func reportCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens report", "heaplens report CAPTURE [--view V] [--format F] [-o OUT] [filters]", args, stdout, stderr)
	q := export.NewQuery("leaks")
	queryFlags(fs, &q)
	format := fs.String("format", "text", "output: "+export.FormatNames())
	out := fs.String("o", "", "write the report to this file instead of standard output")
	top := fs.Int("top", 20, "stacks shown by the text format")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitCode(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "heaplens report: name one capture file")
		fs.Usage()
		return 2
	}
	f := export.LookupFormat(*format)
	if f == nil {
		fmt.Fprintf(stderr, "heaplens report: unknown format %q (%s)\n", *format, export.FormatNames())
		return 2
	}
	if f.NeedsFile && *out == "" {
		fmt.Fprintf(stderr, "heaplens report: --format %s needs -o FILE\n", f.Name)
		return 2
	}
	if *out != "" && same(*out, pos[0]) {
		fmt.Fprintf(stderr, "heaplens report: -o %s would overwrite the capture being read\n", *out)
		return 2
	}
	c, corrupt, ok := loadCapture(pos[0], "report", stderr)
	if !ok {
		return 1
	}
	q.ByThread = f.ByThread
	res, err := q.Compute(c)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens report: %v\n", err)
		return 2
	}
	w, done, err := output(*out, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens report: %v\n", err)
		return 1
	}
	// The replay's garbage (its live table, the decoding buffers) goes
	// before the output is built: with a heap of mostly live records no
	// collection runs in a whole report, so garbage is resident memory
	// (JSON of 10 M samples: 1 067 MB -> 1 024 MB, no time to see).
	runtime.GC()
	if err = f.Write(w, res, export.WriteOptions{Top: *top}); err == nil {
		err = done()
	}
	if err != nil {
		fmt.Fprintf(stderr, "heaplens report: %v\n", err)
		return 1
	}
	if f.NeedsFile {
		fmt.Fprintf(stderr, "heaplens report: wrote %s: %s\n", *out, f.Usage)
	}
	if corrupt {
		return 1
	}
	return 0
}

// serveCmd serves the web UI of a capture until interrupted.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens serve", "heaplens serve CAPTURE [--addr HOST:PORT] [--view V]", args, stdout, stderr)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on (port 0 picks a free port); keep 127.0.0.1 unless you mean to expose it")
	view := fs.String("view", "peak", "view shown first: "+strings.Join(export.Views, ", "))
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitCode(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "heaplens serve: name one capture file")
		return 2
	}
	if !slices.Contains(export.Views, *view) {
		fmt.Fprintf(stderr, "heaplens serve: unknown view %q (%s)\n", *view, strings.Join(export.Views, ", "))
		return 2
	}
	srv := &web.Server{Path: pos[0], View: *view}
	if _, err := srv.Capture(); err != nil {
		fmt.Fprintf(stderr, "heaplens serve: %v\n", err)
		return 1
	}
	url, serve, err := web.Listen(*addr, srv)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "heaplens: serving %s at %s (Ctrl-C to stop)\n", pos[0], url)
	if err := serve(); err != nil {
		fmt.Fprintf(stderr, "heaplens serve: %v\n", err)
		return 1
	}
	return 0
}

// output returns where a command writes: the file path, created, or
// stdout when path is empty; done closes the file and says whether all of
// it was written.
func output(path string, stdout io.Writer) (w io.Writer, done func() error, err error) {
	if path == "" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Close, nil
}

// same reports whether paths a and b name one existing file.
func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// dumpCmd writes a capture's records one per line (capture.Dump).
func dumpCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens dump", "heaplens dump CAPTURE", args, stdout, stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitCode(err)
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "heaplens dump: name one capture file")
		return 2
	}
	f, err := os.Open(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "heaplens dump: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := capture.Dump(stdout, f); err != nil {
		fmt.Fprintf(stderr, "heaplens dump: %s: %v\n", pos[0], err)
		return 1
	}
	return 0
}
