package malloccost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/heaplens/heaplens/bench/internal/harness"
	"github.com/heaplens/heaplens/internal/unwind"
)

// CallgrindRow is one instruction count comparison.
type CallgrindRow struct {
	Name      string  `json:"name"`
	Per       string  `json:"per"` // what one unit is: "pair" or "sample"
	Units     uint64  `json:"units"`
	Bare      uint64  `json:"ir_bare"`
	With      uint64  `json:"ir_heaplens"`
	AddedPer  float64 `json:"added_per_unit"`
	BarePer   float64 `json:"bare_per_unit"`
	Collected string  `json:"collected"` // the function whose inclusive cost was counted
}

// FuncCost is the self cost of one of libheaplens.so's functions.
type FuncCost struct {
	Function string  `json:"function"`
	Ir       uint64  `json:"ir"`
	PerPair  float64 `json:"ir_per_pair"`
}

// CallgrindResult gathers the instruction counts.
type CallgrindResult struct {
	Rows []CallgrindRow `json:"rows"`
	// FastPath is where the unsampled fast path spends its instructions
	// (self cost of libheaplens.so's functions, nothing sampled).
	FastPath []FuncCost `json:"fast_path"`
}

func (b *bench) callgrind() (*CallgrindResult, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		b.warnings.Add("valgrind not found: no instruction counts")
		return nil, nil
	}
	res := &CallgrindResult{}
	pairsArgs := []string{"128", strconv.Itoa(b.o.cgIters), "1"}
	// Only the worker loop is counted (--toggle-collect), so the library's
	// start-up (dlsym, ring creation, module scan) does not leak into the
	// per-pair numbers.
	base, _, err := b.callgrindTotal("pairs-bare", "worker", nil, b.pairs, pairsArgs...)
	if err != nil {
		return nil, err
	}
	variants := []struct {
		name string
		env  func(dir string) []string
	}{
		{"malloc_pairs 128 B, preloaded inactive", func(string) []string { return []string{"LD_PRELOAD=" + b.lib} }},
		{"malloc_pairs 128 B, active, nothing sampled (rate 2^40)", func(d string) []string {
			return []string{"LD_PRELOAD=" + b.lib, "HEAPLENS_DIR=" + d, fmt.Sprintf("HEAPLENS_RATE=%d", uint64(neverRate))}
		}},
		{"malloc_pairs 128 B, active, default rate 512 KiB", func(d string) []string {
			return []string{"LD_PRELOAD=" + b.lib, "HEAPLENS_DIR=" + d, fmt.Sprintf("HEAPLENS_RATE=%d", defaultRate)}
		}},
	}
	for i, v := range variants {
		dir, err := os.MkdirTemp(b.tmp, "ring-")
		if err != nil {
			return nil, err
		}
		tot, file, err := b.callgrindTotal(fmt.Sprintf("pairs-%d", i), "worker", v.env(dir), b.pairs, pairsArgs...)
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, cgRow(v.name, "pair", uint64(b.o.cgIters), base, tot, "worker"))
		if i == 1 {
			if res.FastPath, err = b.libFunctions(file, uint64(b.o.cgIters)); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range []int{5, 50} {
		args := []string{strconv.Itoa(d), strconv.Itoa(b.o.cgDeepN)}
		base, _, err := b.callgrindTotal(fmt.Sprintf("deep%d-bare", d), "leaf", nil, b.deep, args...)
		if err != nil {
			return nil, err
		}
		// With the tables the agent writes as the first stacks arrive, and
		// without (libgcc's unwinder walks every stack).
		for _, tables := range []bool{true, false} {
			dir, err := os.MkdirTemp(b.tmp, "ring-")
			if err != nil {
				return nil, err
			}
			how := "libgcc"
			if tables {
				how = "unwind tables"
				err = b.tablesFor(dir, b.deep)
			}
			var tot uint64
			if err == nil {
				tot, _, err = b.callgrindTotal(fmt.Sprintf("deep%d-rate1-%t", d, tables), "leaf",
					[]string{"LD_PRELOAD=" + b.lib, "HEAPLENS_DIR=" + dir, "HEAPLENS_RATE=1"}, b.deep, args...)
			}
			os.RemoveAll(dir)
			if err != nil {
				return nil, err
			}
			res.Rows = append(res.Rows, cgRow(fmt.Sprintf("deep_sample depth %d (%d frames), rate 1, %s", d, d+4, how),
				"sample", uint64(b.o.cgDeepN), base, tot, "leaf"))
		}
	}
	return res, nil
}

// tablesFor writes into dir the unwind tables that the agent writes for a
// run of prog as its first stacks arrive: the library's, prog's and those
// of the shared objects prog loads (as ldd lists them).
func (b *bench) tablesFor(dir, prog string) error {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %v", prog, err)
	}
	paths := []string{b.lib, prog}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			paths = append(paths, f)
		}
	}
	p := unwind.NewPublisher(dir)
	for _, path := range paths {
		p.Want(path)
	}
	p.Close()
	if _, failed := p.Built(); failed > 0 {
		return fmt.Errorf("unwind tables for %v: %d failed", paths, failed)
	}
	return nil
}

func cgRow(name, per string, units, bare, with uint64, collected string) CallgrindRow {
	return CallgrindRow{
		Name: name, Per: per, Units: units, Bare: bare, With: with, Collected: collected,
		AddedPer: (float64(with) - float64(bare)) / float64(units),
		BarePer:  float64(bare) / float64(units),
	}
}

// callgrindTotal runs prog under callgrind counting only inside fn and
// returns the total instruction count and the output file. The environment
// is given to valgrind itself, which passes it on to the program (the
// valgrind launcher also loads the preload, harmlessly: only the guest is
// counted).
func (b *bench) callgrindTotal(tag, fn string, env []string, prog string, args ...string) (uint64, string, error) {
	out := filepath.Join(b.tmp, "callgrind."+tag)
	a := append([]string{"--tool=callgrind", "--toggle-collect=" + fn, "--callgrind-out-file=" + out, prog}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), b.o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "valgrind", a...)
	cmd.Env = harness.CleanEnv(env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return 0, "", fmt.Errorf("callgrind %s: %v\n%s", tag, err, msg)
	}
	tot, err := harness.CallgrindFile(out)
	if err != nil {
		return 0, "", fmt.Errorf("callgrind %s: %v", tag, err)
	}
	return tot, out, nil
}

// libFunctions runs callgrind_annotate on file and keeps libheaplens.so's functions.
func (b *bench) libFunctions(file string, pairs uint64) ([]FuncCost, error) {
	out, err := exec.Command("callgrind_annotate", "--threshold=100", file).Output()
	if err != nil {
		return nil, fmt.Errorf("callgrind_annotate: %v", err)
	}
	fs := parseAnnotate(string(out), "libheaplens.so")
	for i := range fs {
		fs[i].PerPair = float64(fs[i].Ir) / float64(pairs)
	}
	return fs, nil
}

// annotateLine matches callgrind_annotate's function lines:
// "1,400,000 ( 4.52%)  /src/heaplens.c:free [/path/libheaplens.so]".
var annotateLine = regexp.MustCompile(`^\s*([0-9,]+)\s+\(\s*[0-9.]+%\)\s+(\S.*?)\s+\[(.+)\]\s*$`)

// parseAnnotate returns the functions of callgrind_annotate output whose
// object path contains obj, with their self instruction counts, in output
// order (highest first). The function name is the part after "file:".
func parseAnnotate(text, obj string) []FuncCost {
	var fs []FuncCost
	for _, line := range strings.Split(text, "\n") {
		m := annotateLine.FindStringSubmatch(line)
		if m == nil || !strings.Contains(m[3], obj) {
			continue
		}
		ir, err := strconv.ParseUint(strings.ReplaceAll(m[1], ",", ""), 10, 64)
		if err != nil {
			continue
		}
		name := m[2]
		if i := strings.LastIndex(name, ":"); i >= 0 {
			name = name[i+1:]
		}
		fs = append(fs, FuncCost{Function: name, Ir: ir})
	}
	return fs
}

// ---- the machine ----
