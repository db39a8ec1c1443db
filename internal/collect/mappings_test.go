package collect

import (
	"reflect"
	"testing"
)

func TestMappings(t *testing.T) {
	var m mappings
	for _, a := range []uint64{0x5000, 0x1000, 0x3000, 0x3000, 0x9000} {
		m.add(a)
	}
	tests := []struct {
		addr, n uint64
		want    []uint64
	}{
		{0x2000, 0x1000, nil},           // [0x2000, 0x3000): nothing starts there
		{0x3000, 0x1, []uint64{0x3000}}, // a start, unmapped in part: the mapping goes
		{0x0, 0x6000, []uint64{0x1000, 0x5000}},
		{0x9000, ^uint64(0), []uint64{0x9000}}, // wraps: to the end
		{0x9000, 0x1000, nil},                  // already gone
	}
	for _, tt := range tests {
		if got := m.take(tt.addr, tt.n); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("take(%#x, %#x) = %#x, want %#x", tt.addr, tt.n, got, tt.want)
		}
	}
	if len(m) != 0 {
		t.Errorf("left %#x", m)
	}
}
