package export

import (
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/heap"
)

// A negative part of the RSS decomposition is never printed without
// saying what it means.
func TestNegativeRestExplained(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name     string
		gap      heap.Gap
		negative bool
	}{
		{"reserved beyond RSS", heap.Gap{RSS: 120 * mib, Heap: 210 * mib, Free: 8 * mib, ByKind: map[string]float64{"mmap": 200 * mib, "malloc": 10 * mib}}, true},
		{"RSS beyond the heap", heap.Gap{RSS: 50 * mib, Heap: 20 * mib, Free: 5 * mib, ByKind: map[string]float64{"malloc": 20 * mib}}, false},
	}
	for _, tt := range tests {
		lines := GapLines(&tt.gap, 0, "")
		if len(lines) == 0 {
			t.Fatalf("%s: no lines", tt.name)
		}
		neg, said := strings.Contains(lines[0], "the rest −"), strings.Contains(lines[0], "(negative: ")
		if neg != tt.negative || said != tt.negative {
			t.Errorf("%s: %q: negative %v, explained %v; want %v", tt.name, lines[0], neg, said, tt.negative)
		}
	}
}
