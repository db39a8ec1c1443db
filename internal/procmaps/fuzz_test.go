package procmaps

import (
	"strings"
	"testing"
)

// Parse never panics, and what it accepts is consistent.
func FuzzParse(f *testing.F) {
	f.Add("55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1311 /usr/bin/cat\n")
	f.Add("7f1e2d200000-7f1e2d228000 r-xp 00028000 fd:10 4242   /opt/my lib/libx.so (deleted)\n")
	f.Add("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.End < m.Start {
				t.Fatalf("accepted a mapping ending before it starts: %+v", m)
			}
		}
	})
}
