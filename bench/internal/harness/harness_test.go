package harness

import (
	"math"
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
