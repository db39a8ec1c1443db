package collect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The library's unprofiled.<pid>.<errno>.<bytes>.<comm> markers are named in
// the warnings once, whatever their names hold; other files are not markers.
func TestUnprofiledMarkers(t *testing.T) {
	dir := t.TempDir()
	c := &Collector{dir: dir}
	cases := []struct {
		name   string
		marker bool
		note   string // "" when the marker is malformed
	}{
		{"unprofiled.1234.28.16777216.my.prog", true, "process 1234 (my.prog) ran unprofiled: could not back even the start of a ring of 16 MiB in " + dir + ": no space left on device"},
		{"unprofiled.77.13.65536.", true, "process 77 () ran unprofiled: could not back even the start of a ring of 64 KiB in " + dir + ": permission denied"},
		{"unprofiled.4242.4098.0.tsan_prog", true, "process 4242 (tsan_prog) ran unprofiled: it is built with ThreadSanitizer, whose runtime owns the allocator and must come first; it was restarted as it was started, without heaplens's library"},
		{"unprofiled.x.28.1.p", true, ""},
		{"unprofiled.1.99999999.1.p", true, ""},
		{"unprofiled.", true, ""},
		{"ring.1.0", false, ""},
		{"new.1", false, ""},
	}
	for _, tc := range cases {
		os.WriteFile(filepath.Join(dir, tc.name), nil, 0o600)
		before := len(c.notes)
		if got := c.unprofiledMarker(tc.name); got != tc.marker {
			t.Errorf("%q: marker %v, want %v", tc.name, got, tc.marker)
		}
		switch {
		case tc.note == "" && len(c.notes) != before:
			t.Errorf("%q: noted %q, want nothing", tc.name, c.notes[len(c.notes)-1])
		case tc.note != "" && (len(c.notes) != before+1 || c.notes[before] != tc.note):
			t.Errorf("%q: notes %q, want %q", tc.name, c.notes[before:], tc.note)
		}
		if _, err := os.Stat(filepath.Join(dir, tc.name)); tc.marker == (err == nil) {
			t.Errorf("%q: marker %v but file still there: %v", tc.name, tc.marker, err == nil)
		}
	}
	for i := 0; i < 2*maxNotes; i++ {
		c.note("n%d", i)
	}
	w := c.noteWarnings()
	if len(w) != maxNotes+1 || !strings.HasPrefix(w[maxNotes], "and ") {
		t.Errorf("%d notes give %d warnings ending %q; want the first %d and a count", len(c.notes), len(w), w[len(w)-1], maxNotes)
	}
}
