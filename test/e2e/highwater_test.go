package e2e

import (
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// humanBytes parses size.Human's "41.2 MiB".
func humanBytes(t *testing.T, num, unit string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		t.Fatalf("bad size %q", num)
	}
	return v * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
}

// kernelMaxRSS runs a command bare under /usr/bin/time three times and
// returns the median of the kernel's maxrss (%M), in bytes.
func kernelMaxRSS(t *testing.T, command ...string) float64 {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/time"); err != nil {
		t.Fatalf("!!! /usr/bin/time is missing (scripts/deps.sh installs it): the kernel's figure cannot be read")
	}
	var got []float64
	for range 3 {
		res := run(t, time.Minute, "/usr/bin/time", append([]string{"-f", "maxrss %M"}, command...)...)
		m := regexp.MustCompile(`maxrss (\d+)`).FindStringSubmatch(res.stderr)
		if res.code != 0 || m == nil {
			t.Fatalf("/usr/bin/time %v: exit %d\n%s", command, res.code, res.stderr)
		}
		kib, _ := strconv.ParseFloat(m[1], 64)
		got = append(got, kib*1024)
	}
	sort.Float64s(got)
	return got[1]
}

// TestPeakRSSShortRun: a run of about 30 ms that touches 40 MiB peaks, by
// the summary, within 10 % of what the kernel says the same program peaks
// at bare (/usr/bin/time's %M), and says that figure is exact; its RSS
// series, and that of a 25 ms run, has readings inside the run, which
// lasts less than the agent's regular 100 ms between readings.
func TestPeakRSSShortRun(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "shortrun.c")
	bare := kernelMaxRSS(t, bin, "40")
	capPath, res := profile(t, dir, nil, bin, "40")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	m := regexp.MustCompile(`RSS peak +([0-9.]+) (B|KiB|MiB|GiB) exact`).FindStringSubmatch(res.stderr)
	if m == nil {
		t.Fatalf("no exact RSS peak in the summary:\n%s", res.stderr)
	}
	got := humanBytes(t, m[1], m[2])
	t.Logf("RSS peak %.1f MiB under heaplens, kernel maxrss bare %.1f MiB", got/(1<<20), bare/(1<<20))
	if math.Abs(got-bare) > 0.1*bare {
		t.Errorf("RSS peak %.1f MiB, the kernel's maxrss bare is %.1f MiB: more than 10 %% apart\n%s", got/(1<<20), bare/(1<<20), res.stderr)
	}
	if !strings.Contains(res.stderr, "sampled: the highest reading") {
		t.Errorf("the sampled RSS is not said to be sampled:\n%s", res.stderr)
	}

	readingsInside(t, capPath)
	// A run of about 25 ms (1 MiB touched, 20 ms asleep) has a timeline too.
	capPath, res = profile(t, dir, []string{"-q"}, bin, "1")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	readingsInside(t, capPath)
}

// readingsInside checks that the RSS series of a capture's first process
// has two readings or more between its start and its end.
func readingsInside(t *testing.T, capPath string) {
	t.Helper()
	dump := run(t, time.Minute, heaplensBin(t), "dump", capPath)
	start := regexp.MustCompile(`(?m)^Process +stream=1 .*start_mono_ns=(\d+)`).FindStringSubmatch(dump.stdout)
	end := regexp.MustCompile(`(?m)^End +stream=1 t=(\d+)`).FindStringSubmatch(dump.stdout)
	if start == nil || end == nil {
		t.Fatalf("no Process or End of stream 1 in the dump:\n%s", dump.stdout)
	}
	from, _ := strconv.ParseInt(start[1], 10, 64)
	until, _ := strconv.ParseInt(end[1], 10, 64)
	inside := 0
	for _, r := range regexp.MustCompile(`(?m)^RSS +stream=1 t=(\d+)`).FindAllStringSubmatch(dump.stdout, -1) {
		if at, _ := strconv.ParseInt(r[1], 10, 64); at >= from && at <= until {
			inside++
		}
	}
	t.Logf("the run lasted %.1f ms (until the agent saw its end); %d RSS readings inside it", float64(until-from)/1e6, inside)
	if inside < 2 {
		t.Errorf("%d RSS readings inside a run of %.1f ms, want 2 or more", inside, float64(until-from)/1e6)
	}
}

// TestResidencyAtExit: eight 4 MiB blocks, allocated at the start and
// filled 0.2 s before the program exits, after the agent's last periodic
// reading of their pages: the leaks view shows them resident (read at
// exit, as the kernel's VmHWM, 32 MiB of it theirs, confirms), and no
// reading of them is shown as current when it is not.
func TestResidencyAtExit(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "shortrun.c")
	capPath, res := profile(t, dir, []string{"--rate", "1"}, bin, "4", "late")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	// The periodic reading must have come before the fill, else this run
	// proves nothing about the reading at exit.
	dump := run(t, time.Minute, heaplensBin(t), "dump", capPath)
	var empty []string // readings that found a block untouched but for malloc's header page
	for _, m := range regexp.MustCompile(`(?m)^Resident .* size=4198400 resident=(\d+)$`).FindAllStringSubmatch(dump.stdout, -1) {
		if n, _ := strconv.Atoi(m[1]); n <= 8192 {
			empty = append(empty, m[0])
		}
	}
	if len(empty) == 0 {
		t.Fatalf("!!! no reading of the blocks before their fill (the machine too slow for the workload's timing?): this run cannot tell\n%s", dump.stdout)
	}
	leaks := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks")
	// The eight blocks of one site are one row.
	row := regexp.MustCompile(`(?m)^ +([0-9.]+ (?:B|KiB|MiB)) of +32\.0 MiB in 8 blocks \( *(\d+)%(.*?)\) .*main \(shortrun\.c:\d+\)$`).FindStringSubmatch(leaks.stdout)
	if row == nil {
		t.Fatalf("the 8 blocks are not listed with their residency:\n%s", leaks.stdout)
	}
	if row[1] != "32.0 MiB" || row[2] != "100" || row[3] != "" {
		t.Errorf("blocks filled before exit shown as %s, %s%% resident%s", row[1], row[2], row[3])
	}
	t.Logf("%d readings of the blocks before the fill found them untouched; at exit: %s", len(empty), strings.TrimSpace(row[0]))
}

// TestResidentRanking: a 256 MiB mapping of which 8 KiB are touched,
// beside 40 MiB of heap in use. The peak view ranks the reservation first
// and sums to far more than the kernel's maxrss of the same program bare;
// the resident view (the live set at the highest RSS reading, large
// blocks at their resident bytes) ranks the used heap first at 40 MiB, the
// mapping at its touched pages, and sums to no more than that maxrss.
func TestResidentRanking(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "reserve.c")
	bare := kernelMaxRSS(t, bin)
	capPath, res := profile(t, dir, nil, bin)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	peak := report(t, capPath, "peak")
	resident := report(t, capPath, "resident")
	const mib = 1 << 20
	t.Logf("kernel maxrss bare %.1f MiB; peak view: reserve %.1f MiB, used %.1f MiB; resident view: reserve %.1f KiB, used %.1f MiB, total %.1f MiB",
		bare/mib, peak.site("reserve")/mib, peak.site("used")/mib, resident.site("reserve")/1024, resident.site("used")/mib, resident.total()/mib)
	if peak.site("reserve") < 256*mib || peak.total() <= bare {
		t.Errorf("peak view: the reservation at %.1f MiB, total %.1f MiB; want 256 MiB, above the kernel's %.1f MiB", peak.site("reserve")/mib, peak.total()/mib, bare/mib)
	}
	if used := resident.site("used"); math.Abs(used-40*mib) > 0.05*40*mib {
		t.Errorf("resident view: used at %.1f MiB, every byte of 40 MiB written", used/mib)
	}
	if r := resident.site("reserve"); r < 8192 || r > 64<<10 {
		t.Errorf("resident view: the reservation at %.0f bytes, 8 KiB touched", r)
	}
	if resident.total() > bare {
		t.Errorf("resident view sums to %.1f MiB, above the kernel's maxrss %.1f MiB", resident.total()/mib, bare/mib)
	}
	// The summary ranks the blocks live at the end the same way, reserved beside.
	m := regexp.MustCompile(`large blocks live at the end, by resident bytes.*\n +1\. +40\.0 MiB resident of 40\.0 MiB reserved +used \(reserve\.c:\d+\).*\n +2\. +8\.0 KiB resident of 256\.0 MiB reserved +reserve \(reserve\.c:\d+\)`).FindString(res.stderr)
	if m == "" {
		t.Errorf("the summary does not rank the used heap first by resident bytes, the reservation's 8 KiB of 256 MiB second:\n%s", res.stderr)
	}
}

// TestPythonResidencyAtFinalize is TestResidencyAtExit in Python: eight
// 4 MiB numpy arrays from np.empty, filled with ones 0.2 s before the
// program ends, after the agent's periodic reading found them untouched:
// the leaks view shows them resident, read when the interpreter began
// finalizing (before it frees them), not as the stale 0 %.
func TestPythonResidencyAtFinalize(t *testing.T) {
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import numpy").CombinedOutput(); err != nil {
		t.Fatalf("!!! %s cannot import numpy (scripts/deps.sh installs python3-numpy): %v\n%s", py, err, out)
	}
	dir := t.TempDir()
	capPath, res := profile(t, dir, nil, py, filepath.Join(root, "test", "workloads", "pylate.py"))
	if res.code != 0 || !strings.Contains(res.stdout, "filled 8") {
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	dump := run(t, time.Minute, heaplensBin(t), "dump", capPath)
	untouched := 0
	for _, m := range regexp.MustCompile(`(?m)^Resident .* size=4198400 resident=(\d+)$`).FindAllStringSubmatch(dump.stdout, -1) {
		if n, _ := strconv.Atoi(m[1]); n <= 8192 {
			untouched++
		}
	}
	if untouched == 0 {
		t.Fatalf("!!! no reading of the arrays before their fill (the machine too slow for the workload's timing?): this run cannot tell")
	}
	leaks := run(t, time.Minute, heaplensBin(t), "report", capPath, "--view", "leaks")
	row := regexp.MustCompile(`(?m)^ +([0-9.]+ (?:B|KiB|MiB)) of +32\.0 MiB in 8 blocks \( *(\d+)%(.*?)\) .*pylate\.py:\d+\)$`).FindStringSubmatch(leaks.stdout)
	if row == nil {
		t.Fatalf("the 8 arrays are not listed with their residency:\n%s", leaks.stdout)
	}
	if row[1] != "32.0 MiB" || row[2] != "100" || row[3] != "" {
		t.Errorf("arrays filled before the end shown as %s, %s%% resident%s", row[1], row[2], row[3])
	}
	t.Logf("%d readings before the fill found the arrays untouched; at the end: %s", untouched, strings.TrimSpace(row[0]))
}
