package compare

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

// workload is one program the benchmark runs, at two sizes: full for the
// overhead table, small for --rate 1 (whose cost grows with the number of
// allocations: at the full size it would take minutes) and for accuracy,
// which needs a --rate 1 run of the same size as the estimates.
type workload struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"` // "native" or "python"
	Desc   string   `json:"description"`
	Full   []string `json:"args_full"`
	Small  []string `json:"args_small"`
	python bool
	// command returns the command line (the workload alone, no profiler).
	command func(b *bench, args []string) []string
	// stdin, when set, returns the file the workload reads (sqlite3's script).
	stdin func(b *bench, args []string) string
	// reset, when set, runs before every run (sqlite3 starts from no database).
	reset func(b *bench, args []string)
	// key names the number of the workload's result line.
	key string
	// checksum, when set, replaces the result line's checksum= (sqlite3
	// writes its query results to a file).
	checksum func(b *bench, args []string) (string, error)
	// site names the allocation site of a stack (frame labels, leaf
	// first), "" for none: what the accuracy section compares.
	site func(frames []string) string
	// views are the views the accuracy section compares: allocs, and peak
	// and leaks where the workload holds enough memory for them to mean
	// something at the default rate (malloc_pairs holds nothing).
	views []string
	// expect returns exact byte counts the workload's code fixes, per view
	// and site prefix, to check --rate 1 against arithmetic.
	expect func(args []string) []expectation
	// Exact is the size of the exact-mode comparison with memray (section
	// "Exact mode"; nil: not compared there), purePython that the goal of
	// 3× bare applies, exactOnly that the workload runs there alone (a
	// real library's program, not sized for the other sections).
	Exact      []string `json:"args_exact,omitempty"`
	purePython bool
	exactOnly  bool
	// needs names a module the workload imports (a Debian package's).
	needs string
}

// exactArgs is w's exact-mode size.
func (w *workload) exactArgs() []string { return w.Exact }

// expectation is a byte count known from a workload's source.
type expectation struct {
	View  string  // "allocs" or "leaks"
	Site  string  // prefix of the site label
	Bytes float64 // exact
	How   string  // the arithmetic, for the report
}

// allWorkloads are the workloads, sized for about 1–4 s bare at the full size.
func allWorkloads(quick bool) []*workload {
	ws := []*workload{
		{
			Name: "malloc_pairs", Kind: "native",
			Desc:  "malloc+free of 128 B in a loop, 2 threads (the microbenchmark of hlbench malloc)",
			Full:  []string{"128", "160000000", "2"},
			Small: []string{"128", "1000000", "2"},
			command: func(b *bench, args []string) []string {
				return append([]string{filepath.Join(b.tmp, "malloc_pairs")}, args...)
			},
			key:   "ns_per_pair",
			site:  firstMatching("(malloc_pairs)"),
			views: []string{"allocs"},
			expect: func(args []string) []expectation {
				size, iters, threads := atof(args[0]), atof(args[1]), atof(args[2])
				return []expectation{{"allocs", "worker", size * iters * threads,
					fmt.Sprintf("%s threads × %s × %s B", args[2], args[1], args[0])}}
			},
		},
		{
			Name: "cpp_maps", Kind: "native",
			Desc:  "C++: std::map and std::unordered_map of strings built and destroyed, a 256 KiB record leaked per round (g++ -O2 -g)",
			Full:  []string{"60", "20000"},
			Small: []string{"12", "20000"},
			command: func(b *bench, args []string) []string {
				return append([]string{filepath.Join(b.tmp, "cpp_maps")}, args...)
			},
			key:   "checksum",
			site:  firstMatching("cpp_maps.cpp:"),
			views: []string{"allocs", "peak", "leaks"},
			expect: func(args []string) []expectation {
				r, n := atof(args[0]), atof(args[1])
				return []expectation{
					{"allocs", "make_key (", r * 2 * n * 41, fmt.Sprintf("%s rounds × 2 × %s keys × 41 B", args[0], args[1])},
					{"allocs", "make_value (", r * n * 73, fmt.Sprintf("%s rounds × %s values × 73 B", args[0], args[1])},
					{"leaks", "make_record (", r * 262144, fmt.Sprintf("%s rounds × 262144 B", args[0])},
				}
			},
		},
		{
			Name: "sqlite3", Kind: "native",
			Desc:  "Debian's sqlite3 running a generated script: single-row INSERTs, a bulk INSERT…SELECT, two indexes, joins and aggregates",
			Full:  []string{"40000", "400000"},
			Small: []string{"4000", "40000"},
			command: func(b *bench, args []string) []string {
				return []string{"/usr/bin/sqlite3", b.sqlDB(args)}
			},
			reset: func(b *bench, args []string) { os.Remove(b.sqlDB(args)) },
			stdin: func(b *bench, args []string) string { return b.sqlScript(args) },
			key:   "VmHWM",
			checksum: func(b *bench, args []string) (string, error) {
				return fileChecksum(b.sqlResult(args))
			},
			site: sqliteSite,
		},
		{
			Name: "py_churn", Kind: "python", python: true,
			Desc:  "pure Python: dicts, lists, strings, small objects, json round trips, a rolling window of live data",
			Full:  []string{"800"},
			Small: []string{"30"},
			Exact: []string{"100"}, purePython: true,
			key:  "checksum",
			site: firstMatching("py_churn.py:"),
		},
		{
			Name: "py_numpy", Kind: "python", python: true,
			Desc:  "numpy pipeline with large temporaries (8 MB arrays)",
			Full:  []string{"240", "1000000"},
			Small: []string{"60", "1000000"},
			key:   "checksum",
			site:  firstMatching("py_numpy.py:"),
		},
		{
			Name: "py_server", Kind: "python", python: true,
			Desc:  "request loop (json parse, lookups, render) whose cache keeps one payload in KEEP forever: a slow leak",
			Full:  []string{"60000", "5", "4000"},
			Small: []string{"2000", "1", "8000"},
			Exact: []string{"8000", "5", "4000"}, purePython: true,
			key:   "checksum",
			site:  firstMatching("py_server.py:"),
			views: []string{"allocs", "peak", "leaks"},
			expect: func(args []string) []expectation {
				req, keep, size := atoi(args[0]), atoi(args[1]), atoi(args[2])
				n := (req + keep - 1) / keep // request ids 0, KEEP, 2·KEEP, … below REQUESTS
				return []expectation{{"leaks", "make_payload (", float64(n * (size + 33)),
					fmt.Sprintf("%d payloads × (%d + 33) B", n, size)}}
			},
		},
		{
			Name: "py_jsontool", Kind: "python", python: true,
			Desc:  "the standard library's json.tool (python3 -m json.tool IN OUT) on a generated JSON document of 38 MB: a program nobody here wrote",
			Full:  []string{"38"},
			Small: []string{"4"},
			Exact: []string{"8"}, purePython: true,
			command: func(b *bench, args []string) []string {
				return []string{b.peers.VenvPython, filepath.Join(b.workloads, "py_jsontool.py"), b.jsonInput(args), b.jsonOutput(args)}
			},
			key: "checksum",
			checksum: func(b *bench, args []string) (string, error) {
				return fileChecksum(b.jsonOutput(args))
			},
			// The innermost frame of json's own code: a named one, as
			// _json's static functions are bare addresses that move run
			// to run.
			site: firstNamed("json"),
		},
		{
			Name: "py_sklearn", Kind: "python", python: true, exactOnly: true, needs: "sklearn",
			Desc:  "scikit-learn (Debian python3-sklearn): a RandomForestClassifier fitted with n_jobs=2 threads, then scored",
			Exact: []string{"20", "4000"},
			key:   "checksum",
		},
		{
			Name: "py_torch", Kind: "python", python: true, exactOnly: true, needs: "torch",
			Desc:  "PyTorch on the CPU (Debian python3-torch): an MLP trained with SGD, one thread",
			Exact: []string{"300"},
			key:   "checksum",
		},
	}
	for _, w := range ws {
		if w.views == nil {
			w.views = []string{"allocs", "peak"}
		}
		if w.python && w.command == nil {
			script := w.Name + ".py"
			w.command = func(b *bench, args []string) []string {
				return append([]string{b.peers.VenvPython, filepath.Join(b.workloads, script)}, args...)
			}
		}
		if quick {
			w.Full = quickArgs(w.Name, w.Full)
		}
	}
	return ws
}

// quickArgs shrinks the full size for -quick.
func quickArgs(name string, full []string) []string {
	q := map[string][]string{
		"malloc_pairs": {"128", "4000000", "2"},
		"cpp_maps":     {"8", "20000"},
		"sqlite3":      {"8000", "80000"},
		"py_churn":     {"80"},
		"py_numpy":     {"40", "1000000"},
		"py_server":    {"8000", "5", "4000"},
		"py_jsontool":  {"8"},
	}
	if a, ok := q[name]; ok {
		return a
	}
	return full
}

func atof(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
func atoi(s string) int     { n, _ := strconv.Atoi(s); return n }

// firstMatching names a stack's site by its innermost frame whose label
// contains marker (the workload's own source or binary).
func firstMatching(marker string) func([]string) string {
	return func(frames []string) string {
		for _, f := range frames {
			if strings.Contains(f, marker) {
				return f
			}
		}
		return ""
	}
}

// firstNamed is firstMatching among the frames with a function name (not
// a bare address).
func firstNamed(marker string) func([]string) string {
	return func(frames []string) string {
		for _, f := range frames {
			if strings.Contains(f, marker) && !strings.HasPrefix(f, "0x") {
				return f
			}
		}
		return ""
	}
}

// sqliteAlloc matches SQLite's allocation wrappers, which are not sites.
var sqliteAlloc = []string{"sqlite3Malloc", "sqlite3MallocZero", "sqlite3DbMalloc", "sqlite3_malloc",
	"sqlite3Realloc", "sqlite3DbRealloc", "sqlite3_realloc", "dbMallocRaw", "sqlite3DbStrDup", "sqlite3DbStrNDup"}

// sqliteSite names a stack by its innermost named frame in libsqlite3 that
// is not an allocation wrapper. Debian's library has no debug info: its
// static functions are bare addresses, which differ run to run.
func sqliteSite(frames []string) string {
	for _, f := range frames {
		name, rest, ok := strings.Cut(f, " (")
		if !ok || !strings.HasPrefix(rest, "libsqlite3") || strings.HasPrefix(name, "0x") {
			continue
		}
		alloc := false
		for _, a := range sqliteAlloc {
			if name == a || strings.HasPrefix(name, a) {
				alloc = true
				break
			}
		}
		if !alloc {
			return f
		}
	}
	return ""
}

// prepare builds the native workloads and generates the SQL scripts; a
// workload whose tools are missing is dropped with a loud warning.
func (b *bench) prepare(all []*workload) ([]*workload, error) {
	var ws []*workload
	for _, w := range all {
		if b.o.Only != nil && !b.o.Only[w.Name] {
			continue
		}
		var err error
		switch w.Name {
		case "malloc_pairs":
			err = b.build("gcc", "malloc_pairs.c", "malloc_pairs", "-std=c11", "-O2", "-fomit-frame-pointer", "-pthread")
		case "cpp_maps":
			if b.peers.CxxReason != "" {
				err = fmt.Errorf("%s", b.peers.CxxReason)
				break
			}
			err = b.build("g++", "cpp_maps.cpp", "cpp_maps", "-std=c++17", "-O2", "-g")
		case "sqlite3":
			if b.peers.SqliteReason != "" {
				err = fmt.Errorf("%s", b.peers.SqliteReason)
				break
			}
			for _, args := range [][]string{w.Full, w.Small} {
				if err = b.writeSQL(args); err != nil {
					break
				}
			}
		case "py_jsontool":
			for _, args := range [][]string{w.Full, w.Small, w.Exact} {
				if err = b.writeJSON(args); err != nil {
					break
				}
			}
		}
		if w.needs != "" && err == nil {
			if _, perr := exec.Command(b.peers.VenvPython, "-c", "import "+w.needs).CombinedOutput(); perr != nil {
				err = fmt.Errorf("%s cannot import %s (apt-get install python3-%s): %v", b.peers.VenvPython, w.needs, w.needs, perr)
			}
		}
		if err != nil {
			b.warnings.Add(fmt.Sprintf("LOUD: workload %s skipped: %v", w.Name, err))
			logf("LOUD WARNING: workload %s skipped: %v", w.Name, err)
			continue
		}
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return nil, fmt.Errorf("no workload to run")
	}
	return ws, nil
}

// build compiles bench/workloads/SRC into the temporary directory.
func (b *bench) build(compiler, src, out string, flags ...string) error {
	args := append(append([]string{"-Wall", "-Wextra"}, flags...), "-o", filepath.Join(b.tmp, out), filepath.Join(b.workloads, src))
	if msg, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", src, err, msg)
	}
	return nil
}

// fileChecksum hashes a file and removes it (each run writes it afresh).
func fileChecksum(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	os.Remove(path)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6]), nil
}

// resultChecksum is the run's checksum: the workload's own, or sha256 of
// its output file.
func (b *bench) resultChecksum(w *workload, args []string, line string) (string, error) {
	if w.checksum != nil {
		return w.checksum(b, args)
	}
	return harness.RawValue(line, "checksum"), nil
}
