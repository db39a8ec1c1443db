package pyframe

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// This file checks the decoders against real interpreters: testdata/dump.py
// runs under every CPython 3.8–3.15 found on this machine (3.14 and 3.15 in
// the Debian sid root of `make sidroot`) and reports, for every code object
// of a tricky corpus, the raw line table and the line CPython itself derives
// for every position.

// interp is one Python interpreter found on the machine.
type interp struct {
	path    string          // how to run it
	root    *testenv.Chroot // the root it runs in, if not the host
	minor   int
	version string // sys.version, first word
}

// candidatePythons lists executables that may be CPython 3.8–3.13.
// HEAPLENS_PYTHONS (a PATH-style list) adds more.
func candidatePythons() []string {
	var c []string
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".pyenv")
		}
	}
	if root != "" {
		m, _ := filepath.Glob(filepath.Join(root, "versions", "3.*", "bin", "python3"))
		c = append(c, m...)
	}
	for minor := minMinor; minor <= maxMinor; minor++ {
		name := fmt.Sprintf("python3.%d", minor)
		c = append(c, "/usr/bin/"+name, "/usr/local/bin/"+name)
		if p, err := exec.LookPath(name); err == nil {
			c = append(c, p)
		}
	}
	c = append(c, "/usr/bin/python3")
	if p, err := exec.LookPath("python3"); err == nil {
		c = append(c, p)
	}
	c = append(c, filepath.SplitList(os.Getenv("HEAPLENS_PYTHONS"))...)
	return c
}

// findPythons probes the candidates and returns distinct CPython
// interpreters by minor version. Interpreters are told apart by the real
// path of sys.executable, so pyenv shims and symlinks do not run twice.
func findPythons(t *testing.T) map[int][]interp {
	found := map[int][]interp{}
	seen := map[string]bool{}
	tried := map[string]bool{}
	for _, c := range candidatePythons() {
		if c == "" || tried[c] {
			continue
		}
		tried[c] = true
		if _, err := os.Stat(c); err != nil {
			continue
		}
		out, err := exec.Command(c, "-c",
			"import sys, platform; print(platform.python_implementation(), sys.version_info[0], "+
				"sys.version_info[1], sys.version.split()[0], sys.executable)").Output()
		if err != nil {
			t.Logf("ignoring %s: %v", c, err)
			continue
		}
		f := strings.Fields(string(out))
		if len(f) < 5 || f[0] != "CPython" || f[1] != "3" {
			continue
		}
		minor, _ := strconv.Atoi(f[2])
		exe := strings.Join(f[4:], " ")
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		if seen[exe] {
			continue
		}
		seen[exe] = true
		found[minor] = append(found[minor], interp{path: c, minor: minor, version: f[3]})
	}
	if r, ok := testenv.SidRoot(t); ok {
		for _, py := range r.RootPythons(t) {
			found[py.Minor] = append(found[py.Minor], interp{path: py.Path, root: &r, minor: py.Minor, version: py.Name})
		}
	}
	return found
}

// pyName is a string as dump.py reports it: the text and its code points.
type pyName struct {
	S   string `json:"s"`
	CPs []int  `json:"cps"`
	Max int    `json:"max"`
}

type pyCode struct {
	Filename    pyName `json:"filename"`
	Name        pyName `json:"name"`
	Qualname    pyName `json:"qualname"`
	FirstLineno int    `json:"firstlineno"`
	Table       string `json:"table"`
	NCodeUnits  int    `json:"ncodeunits"`
	Expected    []*int `json:"expected"`
	Addr2Line   []*int `json:"addr2line"`
	CoLines     []*int `json:"colines"`
}

type pyDump struct {
	Minor   int      `json:"minor"`
	Version string   `json:"version"`
	Codes   []pyCode `json:"codes"`
	Live    []struct {
		Code   int   `json:"code"`
		Lasti  int64 `json:"lasti"`
		Lineno *int  `json:"lineno"`
	} `json:"live"`
}

func runDump(t *testing.T, py interp) *pyDump {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dump.json")
	cmd := exec.Command(py.path, filepath.Join("testdata", "dump.py"), out)
	if py.root != nil {
		host, inside := py.root.TempDir(t)
		script, err := os.ReadFile(filepath.Join("testdata", "dump.py"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, "dump.py"), script, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd = py.root.Command(ctx, py.path, filepath.Join(inside, "dump.py"), filepath.Join(inside, "dump.json"))
		out = filepath.Join(host, "dump.json")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s testdata/dump.py: %v\n%s", py.path, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var d pyDump
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("decoding dump of %s: %v", py.path, err)
	}
	if d.Minor != py.minor {
		t.Fatalf("%s reported minor %d, probed as %d", py.path, d.Minor, py.minor)
	}
	if len(d.Codes) == 0 {
		t.Fatalf("%s: dump has no code objects", py.path)
	}
	return &d
}

// pep393 encodes code points the way CPython stores them: the narrowest
// kind that holds the largest code point.
func pep393(cps []int) (kind uint8, data []byte) {
	maxCP := 0
	for _, c := range cps {
		maxCP = max(maxCP, c)
	}
	switch {
	case maxCP < 0x100:
		kind = 1
		for _, c := range cps {
			data = append(data, byte(c))
		}
	case maxCP < 0x10000:
		kind = 2
		for _, c := range cps {
			data = binary.LittleEndian.AppendUint16(data, uint16(c))
		}
	default:
		kind = 4
		for _, c := range cps {
			data = binary.LittleEndian.AppendUint32(data, uint32(c))
		}
	}
	return kind, data
}

func TestCPython(t *testing.T) {
	found := findPythons(t)
	if len(found) == 0 {
		t.Fatal("no CPython 3.8–3.13 interpreter found: the line-table decoders are UNVERIFIED " +
			"(install pyenv versions or set HEAPLENS_PYTHONS)")
	}
	for minor := minMinor; minor <= maxMinor; minor++ {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			pys := found[minor]
			if len(pys) == 0 {
				msg := fmt.Sprintf("!!!!!!!! NO PYTHON 3.%d INTERPRETER FOUND: 3.%d LINE TABLES ARE NOT VERIFIED "+
					"AGAINST CPYTHON (install it, e.g. pyenv install 3.%d, or set HEAPLENS_PYTHONS) !!!!!!!!",
					minor, minor, minor)
				t.Fatal(msg)
			}
			for _, py := range pys {
				t.Run(py.version, func(t *testing.T) {
					checkDump(t, py, runDump(t, py))
				})
			}
		})
	}
}

// checkDump compares every position of every code object of d.
func checkDump(t *testing.T, py interp, d *pyDump) {
	const maxErrs = 40
	errs := 0
	report := func(format string, args ...any) {
		errs++
		if errs <= maxErrs {
			t.Errorf("%s (3.%d): "+format, append([]any{py.path, d.Minor}, args...)...)
		}
	}
	var nPos, nA2L, nCoLines, nLive, nNames int
	kinds := map[string]bool{}
	for ci, c := range d.Codes {
		raw, err := hex.DecodeString(c.Table)
		if err != nil {
			t.Fatalf("code %d: bad hex: %v", ci, err)
		}
		tab := NewTable(d.Minor, raw, c.FirstLineno)
		// pos converts the i-th code unit to the position the C side sends.
		pos := func(i int) int64 {
			if d.Minor <= 9 {
				return int64(2 * i) // f_lasti is a byte offset
			}
			return int64(i)
		}
		want := func(p *int) int {
			if p == nil {
				return c.FirstLineno
			}
			return *p
		}
		name := c.Qualname.S
		for i, e := range c.Expected {
			nPos++
			got, ok := tab.Lookup(pos(i))
			if !ok {
				got = c.FirstLineno
			}
			if got != want(e) || ok != (e != nil) {
				report("%s (firstlineno %d) position %d: got line %d (ok=%v), CPython says %v",
					name, c.FirstLineno, pos(i), got, ok, fmtLine(e))
			}
			if l := Line(d.Minor, raw, c.FirstLineno, pos(i)); l != got {
				report("%s position %d: Line()=%d but Table.Line()=%d", name, pos(i), l, got)
			}
		}
		for i, e := range c.Addr2Line {
			nA2L++
			if got := tab.Line(pos(i)); got != want(e) {
				report("%s position %d: got %d, PyCode_Addr2Line says %v", name, pos(i), got, fmtLine(e))
			}
		}
		for i, e := range c.CoLines {
			nCoLines++
			if got := tab.Line(pos(i)); got != want(e) {
				report("%s position %d: got %d, co_lines() says %v", name, pos(i), got, fmtLine(e))
			}
		}
		if got := tab.Line(-1); got != c.FirstLineno {
			report("%s position -1: got %d, want co_firstlineno %d", name, got, c.FirstLineno)
		}
		for field, n := range map[string]pyName{"co_filename": c.Filename, "co_name": c.Name, "co_qualname": c.Qualname} {
			nNames++
			kind, data := pep393(n.CPs)
			if n.Max >= 0x80 {
				kinds[strconv.Itoa(int(kind))] = true
			}
			if got := DecodeString(kind, data); got != n.S {
				report("%s of %s: DecodeString(kind %d) = %q, want %q", field, name, kind, got, n.S)
			}
		}
	}
	for _, l := range d.Live {
		nLive++
		if l.Code < 0 || l.Code >= len(d.Codes) {
			t.Fatalf("live sample names code %d of %d", l.Code, len(d.Codes))
		}
		c := d.Codes[l.Code]
		raw, _ := hex.DecodeString(c.Table)
		p := l.Lasti // f_lasti as Python shows it is in bytes on every version
		if d.Minor >= 10 && p >= 0 {
			p /= 2
		}
		want := c.FirstLineno
		if l.Lineno != nil {
			want = *l.Lineno
		}
		if got := Line(d.Minor, raw, c.FirstLineno, p); got != want {
			report("live frame of %s at f_lasti %d: got %d, f_lineno %v", c.Qualname.S, l.Lasti, got, fmtLine(l.Lineno))
		}
	}
	// The corpus is built to exercise every non-ASCII PEP 393 kind.
	for _, k := range []string{"1", "2", "4"} {
		if !kinds[k] {
			report("corpus produced no non-ASCII string of kind %s", k)
		}
	}
	if errs > maxErrs {
		t.Errorf("... and %d more mismatches", errs-maxErrs)
	}
	var kl []string
	for k := range kinds {
		kl = append(kl, k)
	}
	sort.Strings(kl)
	t.Logf("%s (%s): %d code objects, %d positions vs %s, %d vs PyCode_Addr2Line, %d vs co_lines, "+
		"%d live frames, %d names (non-ASCII kinds %v)",
		py.path, py.version, len(d.Codes), nPos, expectedSource(d.Minor), nA2L, nCoLines, nLive, nNames, kl)
}

func expectedSource(minor int) string {
	switch {
	case minor <= 9:
		return "dis.findlinestarts"
	case minor == 10:
		return "co_lines"
	}
	return "co_positions"
}

func fmtLine(p *int) string {
	if p == nil {
		return "None"
	}
	return strconv.Itoa(*p)
}
