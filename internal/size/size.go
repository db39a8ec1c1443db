// Package size parses and formats byte sizes for the heaplens command line
// and reports. Units are binary: K = KiB = 1024 bytes.
package size

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// units maps accepted suffixes (lower-cased) to their multiplier. "KB" and
// friends are left out on purpose: they mean 1000 to some readers and 1024
// to others, and a sampling rate off by 2.4% is a silent error.
var units = map[string]uint64{
	"":    1,
	"b":   1,
	"k":   1 << 10,
	"kib": 1 << 10,
	"m":   1 << 20,
	"mib": 1 << 20,
	"g":   1 << 30,
	"gib": 1 << 30,
}

// ParseSize parses a positive byte count: a whole number optionally
// followed (with or without a space) by a unit K, KiB, M, MiB, G or GiB, in
// any letter case, where K = 1024. Examples: "1", "4096", "64K", "64KiB",
// "1M", "2GiB". Zero, negative, fractional and overflowing sizes are errors.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	switch {
	case t == "":
		return 0, errors.New("empty size")
	case strings.HasPrefix(t, "-"):
		return 0, fmt.Errorf("size %q is negative", s)
	case num == "":
		return 0, fmt.Errorf("size %q does not start with a number", s)
	case strings.HasPrefix(unit, "."):
		return 0, fmt.Errorf("size %q is not a whole number of bytes (write 1536K, not 1.5M)", s)
	}
	mult, ok := units[unit]
	if !ok {
		if unit == "kb" || unit == "mb" || unit == "gb" {
			return 0, fmt.Errorf("size %q: unit %q is ambiguous; use %s or %siB (powers of 1024)", s, t[i:], unit[:1], strings.ToUpper(unit[:1]))
		}
		return 0, fmt.Errorf("size %q: unknown unit %q (use K, KiB, M, MiB, G or GiB)", s, strings.TrimSpace(t[i:]))
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	hi, v := bits.Mul64(n, mult)
	if hi != 0 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if v == 0 {
		return 0, fmt.Errorf("size %q must be at least 1 byte", s)
	}
	return v, nil
}

// FormatSize formats n exactly, in the largest binary unit that divides it:
// 524288 → "512 KiB", 3145728 → "3 MiB", 1 → "1 B", and 1536 → "1536 B"
// (1.5 KiB is not whole). ParseSize accepts every result.
func FormatSize(n uint64) string {
	for _, u := range []struct {
		mult uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d %s", n/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// Human formats an estimated byte count approximately, with one decimal in
// the largest unit not exceeding it: "812 B", "1.5 KiB", "12.0 MiB",
// "3.2 GiB". Negative and NaN inputs are formatted as they are.
func Human(b float64) string {
	a := math.Abs(b)
	switch {
	case a >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
