package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/diff"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/size"
)

// diffViews are the views heaplens diff compares; live and timeline need a
// moment, which two runs do not share.
var diffViews = []string{"allocs", "peak", "leaks", "temporary"}

// exitGrown is heaplens diff's status when --fail-over is exceeded, apart
// from 1 (an error) and 2 (bad usage) so that CI can tell them apart.
const exitGrown = 3

func diffCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens diff", "heaplens diff BASE NEW [--view V[,V]] [--format "+diff.FormatNames("|")+"] [--fail-over SIZE] [-o OUT]", args, stdout, stderr)
	views := fs.String("view", "allocs,peak,leaks", "views compared, comma-separated: "+strings.Join(diffViews, ", ")+"; pprof takes one (its inuse_* values; alloc_* come from allocs)")
	format := fs.String("format", "text", "output: "+diff.FormatNames(", ")+" (pprof: NEW minus BASE, as go tool pprof -diff_base computes it)")
	out := fs.String("o", "", "write the comparison to this file instead of standard output")
	var failOver uint64
	failSet := false
	fs.Func("fail-over", "exit with status 3 when a site grew by more than SIZE (e.g. 1MiB; 0: any growth) beyond its interval in any view compared", func(s string) error {
		failSet = true
		if s == "0" {
			failOver = 0
			return nil
		}
		var err error
		failOver, err = size.ParseSize(s)
		return err
	})
	top := fs.Int("top", 10, "sites listed per view and direction by the text format (-1: all)")
	q := export.NewQuery("")
	queryFlags(fs, &q, "lifetime", "min-age", "focus", "hide")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitCode(err)
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "heaplens diff: name two capture files, BASE then NEW")
		fs.Usage()
		return 2
	}
	vs := strings.Split(*views, ",")
	for _, v := range vs {
		if !slices.Contains(diffViews, v) {
			fmt.Fprintf(stderr, "heaplens diff: unknown view %q (%s)\n", v, strings.Join(diffViews, ", "))
			return 2
		}
	}
	f := diff.LookupFormat(*format)
	if f == nil {
		fmt.Fprintf(stderr, "heaplens diff: unknown format %q (%s)\n", *format, diff.FormatNames(", "))
		return 2
	}
	if f.OneView {
		viewSet := false
		fs.Visit(func(f *flag.Flag) { viewSet = viewSet || f.Name == "view" })
		if !viewSet {
			vs = []string{"leaks"}
		}
		if len(vs) != 1 {
			fmt.Fprintf(stderr, "heaplens diff: --format %s compares one --view (its inuse_* values)\n", f.Name)
			return 2
		}
	}
	for _, p := range pos {
		if *out != "" && same(*out, p) {
			fmt.Fprintf(stderr, "heaplens diff: -o %s would overwrite a capture being read\n", *out)
			return 2
		}
	}
	var caps [2]*capture.Capture
	corrupt := false
	for i, p := range pos {
		c, bad, ok := loadCapture(p, "diff", stderr)
		if !ok {
			return 1
		}
		caps[i], corrupt = c, corrupt || bad
	}
	// results[v][side]
	results := make([][2]*export.Result, len(vs))
	for i, v := range vs {
		for side, c := range caps {
			qq := q
			qq.View = v
			if results[i][side], err = qq.Compute(c); err != nil {
				fmt.Fprintf(stderr, "heaplens diff: %s: %v\n", pos[side], err)
				return 2
			}
		}
	}
	var cmp []*diff.Result
	for _, r := range results {
		cmp = append(cmp, diff.Compare(r[0].Capture, r[0].Profile, r[1].Capture, r[1].Profile))
	}
	w, done, err := output(*out, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens diff: %v\n", err)
		return 1
	}
	err = f.Write(w, &diff.Input{Base: diff.RunOf(pos[0], caps[0]), New: diff.RunOf(pos[1], caps[1]),
		Results: results, Compared: cmp, Top: *top})
	if err == nil {
		err = done()
	}
	if err != nil {
		fmt.Fprintf(stderr, "heaplens diff: %v\n", err)
		return 1
	}
	if failSet {
		n := 0
		for _, r := range cmp {
			for _, s := range r.Grown(float64(failOver)) {
				n++
				leaf := "<no frames>"
				if len(s.Frames) > 0 {
					leaf = s.Frames[0]
				}
				fmt.Fprintf(stderr, "heaplens diff: %s: %s grew by %s ± %s, more than %s beyond its interval\n",
					r.View, leaf, size.Human(s.Delta()), size.Human(s.Margin(r.Z)), size.FormatSize(failOver))
			}
		}
		if n > 0 {
			return exitGrown
		}
	}
	if corrupt {
		return 1
	}
	return 0
}
