package heap

import (
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

func TestHighWaterOf(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name    string
		ends    map[uint32]*capture.End
		rss     []capture.RSS
		streams []uint32
		want    HighWater
	}{
		{"nothing recorded", nil, nil, nil, HighWater{}},
		{"the command's ru_maxrss over its own exit mark",
			map[uint32]*capture.End{1: {Stream: 1, HighWater: 41 * mib, MaxRSS: 40 * mib}}, nil, nil,
			HighWater{Bytes: 40 * mib, Command: true, Images: 1}},
		{"a child reparented away peaks above the command",
			map[uint32]*capture.End{1: {Stream: 1, MaxRSS: 10 * mib}, 2: {Stream: 2, HighWater: 50 * mib}}, nil, nil,
			HighWater{Bytes: 50 * mib, Stream: 2, Images: 1}},
		{"--pid leaves wait4's figure out",
			map[uint32]*capture.End{1: {Stream: 1, MaxRSS: 90 * mib}, 2: {Stream: 2, HighWater: 5 * mib}}, nil, []uint32{2},
			HighWater{Bytes: 5 * mib, Stream: 2, Images: 1}},
		{"the agent's VmHWM when the process left no mark",
			map[uint32]*capture.End{3: {Stream: 3}}, []capture.RSS{{Stream: 3, Bytes: 2 * mib, HighWater: 30 * mib}, {Stream: 3, Bytes: mib, HighWater: 31 * mib}}, nil,
			HighWater{Bytes: 31 * mib, Stream: 3, Images: 1}},
	}
	for _, tt := range tests {
		c := capture.NewCapture()
		for s, e := range tt.ends {
			c.Ends[s] = e
		}
		c.RSS = tt.rss
		if got := HighWaterOf(c, Options{Streams: tt.streams}); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
