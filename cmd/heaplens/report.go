package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
)

// views computes each view a report can show.
var views = map[string]func(*capture.Capture, heap.Options) *heap.Profile{
	"allocs": heap.Allocs,
	"leaks":  heap.Leaks,
}

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

func reportCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("heaplens report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	view := fs.String("view", "leaks", "allocs (everything allocated) or leaks (live when each process ended)")
	format := fs.String("format", "text", "text or folded")
	out := fs.String("o", "", "write the report to this file instead of standard output")
	top := fs.Int("top", 20, "stacks shown by the text format")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: heaplens report CAPTURE [--view allocs|leaks] [--format text|folded] [-o OUT]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "heaplens report: name one capture file")
		fs.Usage()
		return 2
	}
	compute, ok := views[*view]
	if !ok {
		fmt.Fprintf(stderr, "heaplens report: unknown view %q (allocs or leaks)\n", *view)
		return 2
	}
	if *format != "text" && *format != "folded" {
		fmt.Fprintf(stderr, "heaplens report: unknown format %q (text or folded)\n", *format)
		return 2
	}
	c, loadErr := capture.Load(pos[0])
	var corrupt *capture.CorruptError
	if loadErr != nil && !errors.As(loadErr, &corrupt) {
		fmt.Fprintf(stderr, "heaplens report: %v\n", loadErr)
		return 1
	}
	if corrupt != nil {
		fmt.Fprintf(stderr, "heaplens report: %s: %v; reporting what is valid before the damage\n", pos[0], corrupt)
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
	p := compute(c, heap.Options{})
	if *format == "folded" {
		err = export.Folded(w, c, p)
	} else {
		err = export.Text(w, c, p, export.TextOptions{Top: *top})
	}
	if err != nil {
		fmt.Fprintf(stderr, "heaplens report: %v\n", err)
		return 1
	}
	if corrupt != nil {
		return 1
	}
	return 0
}
