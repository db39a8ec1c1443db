package harness

import (
	"math"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7, 7, 1, 100, 7}, 7},
	} {
		in := append([]float64(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("median reordered its input: %v", c.in)
			}
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) is not NaN")
	}
}

func TestRotation(t *testing.T) {
	// Over k rounds every mode must run once in every position.
	const k = 3
	seen := map[[2]int]bool{}
	for i := 0; i < k; i++ {
		for pos, m := range Rotation(k, i) {
			seen[[2]int{pos, m}] = true
		}
	}
	if len(seen) != k*k {
		t.Errorf("rotation covers %d of %d (position, mode) pairs", len(seen), k*k)
	}
}

func TestTable(t *testing.T) {
	got := Table([]string{"config", ">ns"}, [][]string{{"128 B", "7.5"}, {"8 MiB × 2 thr", "12345.0"}})
	want := "| config        |      ns |\n" +
		"| ------------- | ------: |\n" +
		"| 128 B         |     7.5 |\n" +
		"| 8 MiB × 2 thr | 12345.0 |\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestCPUModel(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := CPUModel(info); got != "AMD EPYC 7B13" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := CPUModel(""); got != "unknown" {
		t.Errorf("CPUModel(\"\") = %q", got)
	}
}

func TestPairedRatio(t *testing.T) {
	for _, tc := range []struct {
		name           string
		xs, base       []float64
		med, lo, hi, c float64
	}{
		// 5 rounds: only [min, max] reaches 90 %: 1 − 2/32.
		{"5 rounds", []float64{2, 2.2, 1.8, 2.4, 2}, []float64{2, 2, 2, 2, 2}, 1, 0.9, 1.2, 0.9375},
		// 9 rounds: the 2nd and 8th ratios, 1 − 2·10/512.
		{"9 rounds", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, 5, 2, 8, 1 - 20.0/512},
		// Paired, not medians over medians: each run is 10 % slower than
		// its own round's base, whatever the round's speed.
		{"drift cancels", []float64{1.1, 2.2, 3.3, 4.4, 5.5}, []float64{1, 2, 3, 4, 5}, 1.1, 1.1, 1.1, 0.9375},
		// 4 rounds cannot reach 90 %: the range, with no confidence.
		{"too few", []float64{1, 2, 3, 4}, []float64{1, 1, 1, 1}, 2.5, 1, 4, 0},
		{"zero base skipped", []float64{5, 1, 1, 1, 1, 1}, []float64{0, 1, 1, 1, 1, 1}, 1, 1, 1, 0.9375},
	} {
		iv := PairedRatio(tc.xs, tc.base, 0.9)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if !near(iv.Median, tc.med) || !near(iv.Lo, tc.lo) || !near(iv.Hi, tc.hi) || !near(iv.Conf, tc.c) {
			t.Errorf("%s: got %+v, want median %v [%v, %v] at %v", tc.name, iv, tc.med, tc.lo, tc.hi, tc.c)
		}
	}
}

func TestWarnings(t *testing.T) {
	var ws Warnings
	ws.Add("heaplens: warning: dropped 0x41f610")
	ws.Add("heaplens: warning: dropped 0x7f6394156930")
	ws.Note("run 1", "ok\nheaplens: warning: pid 12345 ran unprofiled\nCorrecting symbol for x (warning)\n", "Correcting symbol")
	ws.Note("run 1", "heaplens: warning: pid 67890 ran unprofiled\n")
	want := []string{"heaplens: warning: dropped 0x41f610", "run 1: heaplens: warning: pid 12345 ran unprofiled"}
	if strings.Join(ws.List, "|") != strings.Join(want, "|") {
		t.Errorf("warnings = %q, want %q", ws.List, want)
	}
}
