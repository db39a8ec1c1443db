// Package harness holds what the benchmark commands share: the machine
// stamp every result carries, medians, the interleaving order of runs, and
// markdown tables.
package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Machine identifies where the numbers come from: they mean nothing without it.
type Machine struct {
	CPUs   int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Kernel string `json:"kernel"`
	Glibc  string `json:"glibc"`
	Go     string `json:"go"`
}

// MachineInfo says where the numbers come from: they mean nothing without it.
func MachineInfo() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU = CPUModel(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output(); err == nil {
		m.Glibc = strings.TrimSpace(string(b))
	}
	return m
}

// cpuModel returns the first "model name" of /proc/cpuinfo text.
func CPUModel(cpuinfo string) string {
	for _, l := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// median of xs (the mean of the middle two for an even count); xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// rotation returns the order of the k modes in round i: rotating which mode
// goes first cancels a systematic advantage of running first (or right
// after a given other mode), which plain repetition would keep.
func Rotation(k, i int) []int {
	order := make([]int, k)
	for j := range order {
		order[j] = (i + j) % k
	}
	return order
}

// table formats a markdown table whose columns are padded to equal width,
// so it reads as well on a terminal as rendered. A header starting with
// ">" marks a right-aligned (numeric) column; the ">" is not printed.
func Table(header []string, rows [][]string) string {
	right := make([]bool, len(header))
	h := make([]string, len(header))
	for i, c := range header {
		right[i] = strings.HasPrefix(c, ">")
		h[i] = strings.TrimPrefix(c, ">")
	}
	w := make([]int, len(h))
	for i, c := range h {
		w[i] = max(3, len([]rune(c)))
	}
	for _, r := range rows {
		for i := range h {
			if i < len(r) {
				w[i] = max(w[i], len([]rune(r[i])))
			}
		}
	}
	pad := func(s string, i int) string {
		n := w[i] - len([]rune(s))
		if right[i] {
			return strings.Repeat(" ", n) + s
		}
		return s + strings.Repeat(" ", n)
	}
	var sb strings.Builder
	line := func(cells []string) {
		sb.WriteString("|")
		for i := range h {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			sb.WriteString(" " + pad(c, i) + " |")
		}
		sb.WriteString("\n")
	}
	line(h)
	sb.WriteString("|")
	for i := range h {
		if right[i] {
			sb.WriteString(" " + strings.Repeat("-", w[i]-1) + ": |")
		} else {
			sb.WriteString(" " + strings.Repeat("-", w[i]) + " |")
		}
	}
	sb.WriteString("\n")
	for _, r := range rows {
		line(r)
	}
	return sb.String()
}

// Save prints the markdown and writes it and the JSON of v as DIR/NAME.md
// and DIR/NAME.json.
func Save(dir, name, md string, v any) error {
	fmt.Print(md)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".json"), append(js, '\n'), 0o644)
}

// ParseKV reads "a=1.5 b=2" into a map; other words are ignored.
func ParseKV(line string) map[string]float64 {
	kv := map[string]float64{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			kv[k] = x
		}
	}
	return kv
}

// Bullets is a markdown section of one bullet per item, or "" for none.
func Bullets(title string, items []string) string {
	if len(items) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\n## " + title + "\n\n")
	for _, it := range items {
		sb.WriteString("- " + it + "\n")
	}
	return sb.String()
}

// Interval is a ratio with a distribution-free confidence interval.
type Interval struct {
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	// Conf is the interval's exact coverage (e.g. 0.9375 for 5 rounds);
	// 0 when there are too few rounds for any interval.
	Conf float64 `json:"confidence"`
}

// PairedRatio returns the median of xs[i]/base[i] — runs i of two modes
// made in the same interleaved round, so that the machine's slow drift,
// which moves both, cancels — with the order-statistic confidence interval
// of that median: [r(k), r(n+1−k)] of the sorted ratios holds the true
// median with probability 1 − 2·P(Binomial(n, ½) < k), whatever the
// noise's distribution. k is the largest whose coverage is at least
// minConf. Pairs with a zero or missing base are skipped.
func PairedRatio(xs, base []float64, minConf float64) Interval {
	var r []float64
	for i := range min(len(xs), len(base)) {
		if base[i] > 0 {
			r = append(r, xs[i]/base[i])
		}
	}
	if len(r) == 0 {
		return Interval{}
	}
	sort.Float64s(r)
	n := len(r)
	iv := Interval{Median: Median(r), Lo: r[0], Hi: r[n-1]}
	for k := 1; 2*k <= n; k++ {
		conf := 1 - 2*binomCDF(n, k-1)
		if conf < minConf {
			break
		}
		iv.Lo, iv.Hi, iv.Conf = r[k-1], r[n-k], conf
	}
	return iv
}

// binomCDF is P(Binomial(n, ½) ≤ k).
func binomCDF(n, k int) float64 {
	p, c := 0.0, 1.0 // c = C(n, i)
	for i := 0; i <= k; i++ {
		p += c
		c = c * float64(n-i) / float64(i+1)
	}
	return p / math.Pow(2, float64(n))
}

// Finite is x, or 0 for NaN and ±Inf, which JSON cannot hold.
func Finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// F1, F2 and F3 format x with 1, 2 or 3 decimals, for tables.
func F1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
func F2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
func F3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
