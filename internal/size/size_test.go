package size

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
	}{
		{"1", 1},
		{"4096", 4096},
		{"64K", 64 << 10},
		{"64KiB", 64 << 10},
		{"64k", 64 << 10},
		{"64kib", 64 << 10},
		{"64 KiB", 64 << 10},
		{" 512K ", 512 << 10},
		{"1M", 1 << 20},
		{"1MiB", 1 << 20},
		{"2G", 2 << 30},
		{"2GiB", 2 << 30},
		{"100B", 100},
		{"18446744073709551615", 1<<64 - 1},
		{"17179869183G", 17179869183 << 30},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty size"},
		{"   ", "empty size"},
		{"0", "at least 1 byte"},
		{"0K", "at least 1 byte"},
		{"-1", "negative"},
		{"-64K", "negative"},
		{"abc", "does not start with a number"},
		{"K", "does not start with a number"},
		{"1.5M", "not a whole number"},
		{"64X", `unknown unit "X"`},
		{"64 KiBs", "unknown unit"},
		{"64KB", "ambiguous"},
		{"1mb", "ambiguous"},
		{"18446744073709551616", "too large"},
		{"17179869184G", "too large"},
		{"99999999999999999999999K", "too large"},
	}
	for _, tt := range tests {
		_, err := ParseSize(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSize(%q) error = %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1000, "1000 B"},
		{1024, "1 KiB"},
		{1536, "1536 B"},
		{512 << 10, "512 KiB"},
		{1 << 20, "1 MiB"},
		{3 << 30, "3 GiB"},
		{1<<30 + 1<<20, "1025 MiB"},
	}
	for _, tt := range tests {
		got := FormatSize(tt.in)
		if got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in > 0 {
			if back, err := ParseSize(got); err != nil || back != tt.in {
				t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", tt.in, back, err)
			}
		}
	}
}

func TestHuman(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0 B"},
		{812.4, "812 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{12.04 * (1 << 20), "12.0 MiB"},
		{3.25 * (1 << 30), "3.2 GiB"},
		{5000 * (1 << 30), "5000.0 GiB"},
	}
	for _, tt := range tests {
		if got := Human(tt.in); got != tt.want {
			t.Errorf("Human(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
