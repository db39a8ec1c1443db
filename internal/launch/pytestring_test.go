package launch

import (
	"os"
	"regexp"
	"testing"

	"github.com/heaplens/heaplens/internal/size"
)

// The pytest plugin passes --ring-size for small rates itself (it is
// Python, and cannot read ExactRingSize): the two must stay equal, or a
// pytest run at --rate 1 drops stacks a heaplens run keeps.
func TestPytestPluginRingIsExactRingSize(t *testing.T) {
	src, err := os.ReadFile("../../python/heaplens/pytest_plugin.py")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^_SMALL_RATE_RING = "([^"]+)"$`).FindSubmatch(src)
	if m == nil {
		t.Fatal(`pytest_plugin.py: no line _SMALL_RATE_RING = "SIZE"`)
	}
	n, err := size.ParseSize(string(m[1]))
	if err != nil {
		t.Fatalf("pytest_plugin.py: _SMALL_RATE_RING %q: %v", m[1], err)
	}
	if n != ExactRingSize {
		t.Errorf("pytest_plugin.py's _SMALL_RATE_RING is %q (%d bytes); launch.ExactRingSize is %d", m[1], n, ExactRingSize)
	}
}
