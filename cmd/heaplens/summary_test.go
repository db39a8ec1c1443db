package main

import "testing"

// The summary takes about summaryBytesPerRecord per record and must stay
// within half of the memory free.
func TestSummaryFits(t *testing.T) {
	for _, tc := range []struct {
		records, free uint64
		fits          bool
	}{
		{0, 0, true},
		{1, 0, false},
		{10_000_000, 2_000_000_000, true}, // 1 GB of 2
		{10_000_001, 2_000_000_000, false},
		{4_000_000_000, 1 << 40, true},
		{1 << 62, 1 << 63, false}, // no overflow
	} {
		if got := summaryFits(tc.records, tc.free); got != tc.fits {
			t.Errorf("summaryFits(%d records, %d bytes free) = %v, want %v", tc.records, tc.free, got, tc.fits)
		}
	}
}
