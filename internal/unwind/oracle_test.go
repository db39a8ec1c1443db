package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The files the oracle test compiles; the Debian Python links libpython
// statically, which makes it the largest.
var oracleFiles = []string{
	"/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/usr/bin/python3.11",
}

// The arm64 files: Debian's cross toolchain's (gcc-aarch64-linux-gnu,
// which make bin/heaplens-arm64 needs), and the arm64 root's python3.11
// when make armroot made it.
var oracleFilesARM64 = []string{
	"/usr/aarch64-linux-gnu/lib/libc.so.6",
	"/usr/aarch64-linux-gnu/lib/libstdc++.so.6",
}

// pyenvLibpython returns a pyenv Python 3.12's libpython, or "".
func pyenvLibpython() string {
	root := os.Getenv("PYENV_ROOT")
	if out, err := exec.Command("pyenv", "root").Output(); err == nil {
		root = strings.TrimSpace(string(out))
	}
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	m, _ := filepath.Glob(filepath.Join(root, "versions", "3.12.*", "lib", "libpython3.12.so.1.0"))
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1]
}

// needReadelf returns readelf's path; the oracle tests cannot do without.
func needReadelf(t testing.TB) string {
	p, err := exec.LookPath("readelf")
	if err != nil {
		t.Fatalf("readelf (binutils) is needed as the oracle of these tests: apt-get install -y binutils (%v)", err)
	}
	return p
}

// Every row readelf --debug-dump=frames-interp prints for a file's
// .eh_frame, compared with the row of the table Build writes: binutils
// interprets the CFI independently of this package.
func TestReadelfOracle(t *testing.T) {
	readelf := needReadelf(t)
	files := append([]string(nil), oracleFiles...)
	if p := pyenvLibpython(); p != "" {
		files = append(files, p)
	} else {
		t.Log("NOTE: no pyenv Python 3.12 (versions/3.12.*/lib/libpython3.12.so.1.0): it is NOT checked")
	}
	arm := append([]string(nil), oracleFilesARM64...)
	if _, err := os.Stat(arm[0]); err != nil {
		t.Logf("!!! %s is missing (apt-get install gcc-aarch64-linux-gnu): arm64's CFI is NOT checked", arm[0])
		arm = nil
	}
	if py := filepath.Join(armRootDir(), "usr/bin/python3.11"); arm != nil {
		if _, err := os.Stat(py); err == nil {
			arm = append(arm, py)
		} else {
			t.Logf("NOTE: no arm64 root (make armroot): its python3.11 is NOT checked")
		}
	}
	files = append(files, arm...)
	for _, path := range files {
		t.Run(strings.TrimPrefix(strings.ReplaceAll(path, "/", "_"), "_"), func(t *testing.T) {
			t.Parallel()
			checkOracle(t, readelf, path)
		})
	}
}

// -wN: readelf would follow .gnu_debuglink to a debug file whose
// .eh_frame is NOBITS, and fail.

func checkOracle(t *testing.T, readelf, path string) {
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the oracle test needs %s: %v", path, err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := compile(f)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(readelf, "-wN", "--debug-dump=frames-interp", path).Output()
	if err != nil {
		t.Fatalf("readelf --debug-dump=frames-interp %s: %v", path, err)
	}
	dump, err := parseReadelf(out)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := exec.Command(readelf, "-wN", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf --debug-dump=frames %s: %v", path, err)
	}
	// readelf prints "u" for an rbp the FDE has not saved yet as for one it
	// declares undefined (kind 2 here): such FDEs cannot be compared.
	ambiguous := fdesWith(raw, "DW_CFA_undefined: r6 (rbp)")
	arm := f.Machine == elf.EM_AARCH64
	raUndefined := map[int]bool{}
	if arm {
		// The same for x29; and arm64's return address is in x30 until it
		// is saved, which readelf also prints "u".
		ambiguous = fdesWith(raw, "DW_CFA_undefined: r29 (x29)")
		raUndefined = fdesWith(raw, "DW_CFA_undefined: r30 (x30)")
	}

	tab, err := Parse(c.table.bytes())
	if err != nil {
		t.Fatalf("Parse of the table Build wrote: %v", err)
	}
	o := oracle{t: t, table: tab, arm: arm, raUndefined: raUndefined}
	reasons := map[string]int{}
	kept := map[uint64]bool{} // the starts of the FDEs in the table
	for _, fd := range dump.fdes {
		if why, ok := c.skipped[fd.off]; ok {
			reasons[why]++
			continue
		}
		kept[fd.begin] = true
		if ambiguous[fd.off] {
			reasons["rbp undefined (ambiguous in readelf)"]++
			continue
		}
		o.checkFDE(fd, dump.cies[fd.cie])
	}
	for _, fd := range dump.fdes {
		if _, ok := c.skipped[fd.off]; !ok && !kept[fd.end] {
			o.check(fd.end, "the end of the FDE at "+offHex(fd.off), Rule{Kind: KindUnknown}, true)
		}
	}
	t.Logf("%s: %d FDEs, %d readelf rows (%d ambiguous), %d addresses checked, %d table rows, %d mismatches; FDEs left out: %v",
		path, len(dump.fdes), o.rows, o.ambiguous, o.checked, len(c.table.Addr), o.bad, reasons)
	if o.bad > 0 {
		t.Errorf("%d mismatches with readelf; the first:\n%s", o.bad, strings.Join(o.first, "\n"))
	}
	if n := len(c.skipped) - reasons["empty"]; n > 10 {
		t.Errorf("%d FDEs left out of the table, expected only a few", n)
	}
	if len(dump.fdes) < 1000 || o.checked < 10000 {
		t.Errorf("only %d FDEs and %d addresses: readelf's output was not understood", len(dump.fdes), o.checked)
	}
}

func offHex(off int) string { return fmt.Sprintf("%08x", off) }

// oracle compares the table with what readelf says, counting mismatches.
type oracle struct {
	t           *testing.T
	arm         bool         // an arm64 file
	raUndefined map[int]bool // arm64: the FDEs that declare x30 undefined
	table       *Table
	checked     int // addresses
	rows        int // readelf's rows (the last at each address)
	ambiguous   int // arm64 rows whose return address rule readelf's \"u\" does not tell
	bad         int
	first       []string
}

// check compares the table at addr with want; at a kind-2 address after
// the last row, (unknown, not in the table) is fine too if mayEnd.
func (o *oracle) check(addr uint64, where string, want Rule, mayEnd bool) {
	o.checked++
	got, ok := o.table.Lookup(addr)
	if ok && got == want || !ok && mayEnd && want.Kind == KindUnknown {
		return
	}
	o.bad++
	if len(o.first) < 20 {
		o.first = append(o.first, fmt.Sprintf("%#x (%s): got %v (ok=%v), readelf says %v", addr, where, got, ok, want))
	}
}

// checkFDE checks each address where readelf starts a row of fd, and the
// last byte before the next, against readelf's rule.
func (o *oracle) checkFDE(fd *readelfFDE, ci *readelfCIE) {
	rows := fd.rows
	if len(rows) == 0 && ci != nil && len(ci.rows) > 0 {
		// An FDE of nops: readelf prints nothing; the CIE's row is its rule.
		last := ci.rows[len(ci.rows)-1]
		last.loc = fd.begin
		rows = []readelfRow{last}
	}
	// readelf prints a row at each advance, even of 0 bytes, and past the
	// end: the last row at an address is the one that holds there.
	var live []readelfRow
	for _, r := range rows {
		if r.loc < fd.begin || r.loc >= fd.end {
			continue
		}
		if n := len(live); n > 0 && live[n-1].loc == r.loc {
			live = live[:n-1]
		}
		live = append(live, r)
	}
	for i, r := range live {
		if r.ra == "u" && o.raUndefined[fd.off] {
			// arm64: x30 in the register (a row before the FDE declares
			// it undefined: _start's first instruction) or undefined;
			// readelf prints "u" for both.
			o.ambiguous++
			continue
		}
		want := r.rule(o.arm, o.raUndefined[fd.off])
		if ci != nil && strings.Contains(ci.aug, "S") {
			want = Rule{Kind: KindUnknown} // signal frames are libgcc's
		}
		if raCol := map[bool]string{false: "16", true: "30"}[o.arm]; ci != nil && ci.ra != raCol {
			want = Rule{Kind: KindUnknown} // not the ABI's return address column
		}
		next := fd.end
		if i+1 < len(live) {
			next = live[i+1].loc
		}
		where := "FDE " + offHex(fd.off) + " row " + r.text
		o.rows++
		o.check(r.loc, where, want, false)
		if next-1 != r.loc {
			o.check(next-1, where+" (its last byte)", want, false)
		}
	}
}

// readelfDump is what readelf --debug-dump=frames-interp prints of .eh_frame.
type readelfDump struct {
	cies map[int]*readelfCIE
	fdes []*readelfFDE
}

type readelfCIE struct {
	aug  string
	ra   string // the return address column
	rows []readelfRow
}

type readelfFDE struct {
	off, cie   int
	begin, end uint64
	rows       []readelfRow
}

// readelfRow is one row of the interpreted table: the CFA column and the
// rbp and return-address columns ("" when readelf prints none).
type readelfRow struct {
	loc          uint64
	cfa, rbp, ra string
	text         string
}

var (
	entryRE = regexp.MustCompile(`^([0-9a-f]+) ([0-9a-f]+) ([0-9a-f]+) (CIE|FDE) (.*)$`)
	cieRE   = regexp.MustCompile(`^"([^"]*)" cf=(\d+) df=(-?\d+) ra=(\d+)`)
	fdeRE   = regexp.MustCompile(`^cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	rowRE   = regexp.MustCompile(`^[0-9a-f]{16} `)
	cfaRE   = regexp.MustCompile(`^(rsp|rbp|sp|x29)([+-]\d+)$`)
	rbpRE   = regexp.MustCompile(`^c(-\d+)$`)
)

// parseReadelf parses the first .eh_frame section of out.
func parseReadelf(out []byte) (*readelfDump, error) {
	d := &readelfDump{cies: map[int]*readelfCIE{}}
	var cols []string
	var rows *[]readelfRow
	started := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Contents of the .eh_frame section"):
			if started {
				return d, nil
			}
			started = true
		case !started:
		case strings.HasSuffix(line, "ZERO terminator"):
			return d, nil
		case strings.HasPrefix(line, "   LOC "):
			cols = strings.Fields(line)[1:]
		case rowRE.MatchString(line):
			r, err := parseRow(line, cols)
			if err != nil {
				return nil, err
			}
			if rows == nil {
				return nil, fmt.Errorf("readelf: a row outside an entry: %q", line)
			}
			*rows = append(*rows, r)
		case entryRE.MatchString(line):
			m := entryRE.FindStringSubmatch(line)
			off, _ := strconv.ParseInt(m[1], 16, 64)
			var err error
			rows, err = d.entry(int(off), m[4], m[5])
			if err != nil {
				return nil, err
			}
		}
	}
	return d, sc.Err()
}

// entry records a CIE or FDE header line and returns where its rows go.
func (d *readelfDump) entry(off int, kind, rest string) (*[]readelfRow, error) {
	if kind == "CIE" {
		m := cieRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("readelf: CIE line %q", rest)
		}
		ci := &readelfCIE{aug: m[1], ra: m[4]}
		d.cies[off] = ci
		return &ci.rows, nil
	}
	m := fdeRE.FindStringSubmatch(rest)
	if m == nil {
		return nil, fmt.Errorf("readelf: FDE line %q", rest)
	}
	cieOff, _ := strconv.ParseInt(m[1], 16, 64)
	begin, _ := strconv.ParseUint(m[2], 16, 64)
	end, _ := strconv.ParseUint(m[3], 16, 64)
	fd := &readelfFDE{off: off, cie: int(cieOff), begin: begin, end: end}
	d.fdes = append(d.fdes, fd)
	return &fd.rows, nil
}

func parseRow(line string, cols []string) (readelfRow, error) {
	// A register rule reads "r9 (r9)": one column.
	var f []string
	for _, w := range strings.Fields(line) {
		if n := len(f); n > 0 && strings.HasPrefix(w, "(") {
			f[n-1] += " " + w
			continue
		}
		f = append(f, w)
	}
	if len(f) != len(cols)+1 || len(cols) == 0 || cols[0] != "CFA" {
		return readelfRow{}, fmt.Errorf("readelf: row %q does not match the columns %q", line, cols)
	}
	loc, err := strconv.ParseUint(f[0], 16, 64)
	if err != nil {
		return readelfRow{}, err
	}
	r := readelfRow{loc: loc, cfa: f[1], text: strings.Join(f, " ")}
	for i, c := range cols[1:] {
		switch c {
		case "rbp", "x29":
			r.rbp = f[i+2]
		case "ra":
			r.ra = f[i+2]
		}
	}
	return r, nil
}

// rule is the table's rule for readelf's row, by docs/unwind-format.md:
// of an arm64 file if arm (raUndefined: its FDE declares x30 undefined).
func (r readelfRow) rule(arm, raUndefined bool) Rule {
	unknown := Rule{Kind: KindUnknown}
	var raSlot uint8
	raPaired := false // arm64: the return address just above the saved x29
	switch {
	case r.ra == "u" && (!arm || raUndefined):
		return Rule{Kind: KindEnd}
	case r.ra == "c-8" && !arm:
	case arm && strings.HasPrefix(r.ra, "c-"):
		n, err := strconv.Atoi(r.ra[2:])
		switch {
		case err == nil && n > 0 && n%8 == 0 && n <= 8*maxRASlot:
			raSlot = uint8(n / 8)
		case err == nil && r.rbp == "c-"+strconv.Itoa(n+8):
			raPaired = true
		default:
			return unknown
		}
	default: // not saved where the library reads it, or no rule at all
		return unknown
	}
	m := cfaRE.FindStringSubmatch(r.cfa)
	if m == nil {
		return unknown // "exp", or another register
	}
	off, _ := strconv.Atoi(m[2])
	if off < 0 || off > 0xffff {
		return unknown
	}
	want := Rule{Kind: KindRSP, CFAOffset: uint16(off), RASlot: raSlot}
	if m[1] == "rbp" || m[1] == "x29" {
		want.Kind = KindRBP
	}
	switch r.rbp {
	case "", "u", "s": // never saved (readelf's "u"), or the same value
		if raPaired {
			return unknown
		}
		return want
	}
	m = rbpRE.FindStringSubmatch(r.rbp)
	if m == nil {
		return unknown // another register, an expression, a val_ rule
	}
	n, _ := strconv.Atoi(m[1])
	if n >= 0 || n%8 != 0 || n < -8*255 {
		return unknown
	}
	want.RBPSlot = uint8(-n / 8)
	return want
}

// fdesWith returns the offsets of the FDEs whose instructions in
// readelf --debug-dump=frames include the string s.
func fdesWith(raw []byte, s string) map[int]bool {
	found := map[int]bool{}
	cur := -1
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := entryRE.FindStringSubmatch(line); m != nil {
			off, _ := strconv.ParseInt(m[1], 16, 64)
			cur = int(off)
		} else if cur >= 0 && strings.Contains(line, s) {
			found[cur] = true
		}
	}
	return found
}

// BenchmarkBuild compiles libc's .eh_frame, and the Debian Python's (the
// largest of the oracle files).
func BenchmarkBuild(b *testing.B) {
	for _, path := range []string{oracleFiles[0], oracleFiles[2]} {
		b.Run(filepath.Base(path), func(b *testing.B) {
			f, err := elf.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			var t []byte
			for b.Loop() {
				if t, err = Build(f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(t)), "table-bytes")
			b.ReportMetric(float64(binary.LittleEndian.Uint32(t[12:])), "rows")
		})
	}
}

// armRootDir is where make armroot keeps the arm64 root (scripts/debroot.sh).
func armRootDir() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "heaplens", "roots", "bookworm-arm64")
}
