// Command hlbench runs heaplens's benchmarks over one harness
// (bench/internal/harness): each writes NAME.md and NAME.json into -out
// and prints the markdown; docs/benchmarks.md reads them.
//
// Run it from the repository root after `make`:
//
//	go run ./bench/cmd/hlbench [flags] [malloc] [python] [compare] [attach]
//
//	malloc   the cost of malloc+free pairs and of one sample (malloccost)
//	python   the cost of one sample with Python frames (compare.RunPython)
//	compare  whole workloads against bare runs, heaptrack and memray;
//	         estimates against exact runs; scale; start-up (compare)
//	attach   the pause heaplens attach makes in a process (attachcost)
//
// With no benchmark named, all four run in that order.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/attachcost"
	"github.com/heaplens/heaplens/bench/internal/compare"
	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/bench/internal/malloccost"
)

func main() {
	os.Exit(realMain(os.Args[1:]))
}

func realMain(args []string) int {
	fs := flag.NewFlagSet("hlbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: hlbench [flags] [malloc] [python] [compare] [attach]\n\nflags:\n")
		fs.PrintDefaults()
	}
	var c harness.Common
	c.Register(fs)
	x := compare.DefaultOptions
	var only string
	fs.StringVar(&x.Heaplens, "heaplens", "", "compare: heaplens binary to measure (default ROOT/bin/heaplens)")
	fs.StringVar(&x.Baseline, "baseline", "", "compare: another heaplens binary to measure beside -heaplens, interleaved (an A/B of two builds)")
	fs.StringVar(&only, "only", "", "compare: comma-separated workloads to run (default all)")
	fs.BoolVar(&x.NoBuild, "no-build", false, "compare: do not run make bin/heaplens first")
	fs.BoolVar(&x.Scale, "scale", true, "compare: run the scale measurements")
	fs.BoolVar(&x.Accuracy, "accuracy", true, "compare: run --rate 1 and the accuracy section (small sizes)")
	fs.BoolVar(&x.Instructions, "instructions", true, "compare: count the target's instructions under callgrind, bare and under heaplens (small sizes)")
	fs.IntVar(&x.Layouts, "layouts", x.Layouts, "compare: count a Python workload's sampling cost in this many address layouts (ring sizes: what is mapped after the ring moves) and judge its median")
	fs.BoolVar(&x.Exact, "exact", true, "compare: --rate 1 against memray --native --trace-python-allocators on the Python workloads (needs -peers)")
	fs.BoolVar(&x.Overhead, "overhead", true, "compare: run the overhead and accuracy sections (false: instructions, exact mode and scale only)")
	fs.BoolVar(&x.Peers, "peers", true, "compare: run heaptrack and memray (false: bare and heaplens only, for A/B runs of heaplens builds)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if only != "" {
		x.Only = map[string]bool{}
		for _, w := range strings.Split(only, ",") {
			x.Only[strings.TrimSpace(w)] = true
		}
	}
	benches := map[string]func() error{
		"malloc":  func() error { return malloccost.Run(c) },
		"python":  func() error { return compare.RunPython(c) },
		"compare": func() error { return compare.Run(c, x) },
		"attach":  func() error { return attachcost.Run(c) },
	}
	names := fs.Args()
	if len(names) == 0 {
		names = []string{"malloc", "python", "compare", "attach"}
	}
	for _, n := range names {
		if benches[n] == nil {
			fmt.Fprintf(os.Stderr, "hlbench: unknown benchmark %q (malloc, python, compare or attach)\n", n)
			return 2
		}
	}
	for _, n := range names {
		if err := benches[n](); err != nil {
			fmt.Fprintf(os.Stderr, "hlbench %s: %v\n", n, err)
			return 1
		}
	}
	return 0
}
