package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/web"
)

// formats are the --format values of heaplens report.
var formats = []string{"text", "folded", "pprof", "speedscope", "json", "html"}

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

// queryFlags registers the view and filter flags shared by report and serve.
func queryFlags(fs *flag.FlagSet, q *export.Query) {
	fs.StringVar(&q.View, "view", q.View, "view: "+strings.Join(export.Views, ", "))
	q.At = export.AtEnd
	fs.Func("at", "live: time into the run, e.g. 1.5s (default: the end, the last allocation or free)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err == nil && d < 0 {
			err = errors.New("must not be negative")
		}
		q.At = d
		return err
	})
	fs.DurationVar(&q.Lifetime, "lifetime", heap.DefaultLifetime, "temporary: blocks freed within this long of their allocation")
	fs.DurationVar(&q.MinAge, "min-age", 0, "leaks: only blocks at least this old when the process's records end")
	fs.IntVar(&q.PID, "pid", 0, "only this process (every image of the pid)")
	var thread uint
	fs.Func("thread", "only allocations made by this thread id", func(s string) error {
		_, err := fmt.Sscan(s, &thread)
		q.Thread = uint32(thread)
		return err
	})
	fs.StringVar(&q.Focus, "focus", "", "only stacks with a frame matching this regexp")
	fs.StringVar(&q.Hide, "hide", "", "leave frames matching this regexp out of stacks")
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
	return c, ce != nil, true
}

func reportCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens report", "heaplens report CAPTURE [--view V] [--format F] [-o OUT] [filters]", args, stdout, stderr)
	q := export.Query{View: "leaks"}
	queryFlags(fs, &q)
	format := fs.String("format", "text", "output: "+strings.Join(formats, ", "))
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
	if !contains(export.Views, q.View) {
		fmt.Fprintf(stderr, "heaplens report: unknown view %q (%s)\n", q.View, strings.Join(export.Views, ", "))
		return 2
	}
	if !contains(formats, *format) {
		fmt.Fprintf(stderr, "heaplens report: unknown format %q (%s)\n", *format, strings.Join(formats, ", "))
		return 2
	}
	if *format == "html" && *out == "" {
		fmt.Fprintln(stderr, "heaplens report: --format html needs -o FILE.html")
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
	q.ByThread = *format == "pprof"
	res, err := q.Compute(c)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens report: %v\n", err)
		return 2
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "heaplens report: %v\n", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	cc, p := res.Capture, res.Profile
	switch *format {
	case "folded":
		err = export.Folded(w, cc, p)
	case "pprof":
		inuse := p
		if q.View == "allocs" { // Go's shape: in-use at the end beside allocated
			opt := q
			opt.View = "leaks"
			var lr *export.Result
			if lr, err = opt.Compute(c); err == nil {
				inuse = lr.Profile
				inuse.View = "allocs"
			}
		}
		if err == nil {
			err = export.PProf(w, cc, res.Allocs, inuse)
		}
	case "speedscope":
		err = export.Speedscope(w, cc, p)
	case "json":
		err = export.JSON(w, cc, p, export.DocOptions{Timeline: res.Timeline, Filter: res.Filter})
	case "html":
		err = web.WriteHTML(w, res.Doc())
	default:
		if q.View == "timeline" {
			err = export.TimelineText(w, cc, res.Timeline)
		} else {
			err = export.Text(w, cc, p, export.TextOptions{Top: *top})
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "heaplens report: %v\n", err)
		return 1
	}
	if *out != "" && *format == "html" {
		fmt.Fprintf(stderr, "heaplens report: wrote %s (open it in a browser; it needs no network)\n", *out)
	}
	if corrupt {
		return 1
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
	if !contains(export.Views, *view) {
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
