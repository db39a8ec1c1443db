package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/heaplens/heaplens/internal/capture"
)

// checkStacksOnce checks the stacks of a --rate 1 capture: most records
// name their thread's latest stack as their parent (docs/capture-format.md,
// "Parents"), and loaded, whole, no two stacks hold the same Locations
// (each has one ID, whether the agent merged it whole or from its base).
func checkStacksOnce(t *testing.T, capPath string) {
	t.Helper()
	f, err := os.Open(capPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := capture.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	records, parents := 0, 0
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Type == capture.RecStack {
			records++
			if rec.Stack.Parent != 0 {
				parents++
			}
		}
	}
	if records == 0 || parents < records/2 {
		t.Errorf("%d of %d Stack records name a parent, want half or more", parents, records)
	}
	c, err := capture.Load(capPath)
	if err != nil || len(c.Problems) != 0 {
		t.Fatalf("loading: %v, problems %q", err, c.Problems)
	}
	seen := make(map[string]uint64, len(c.Stacks))
	for id, s := range c.Stacks {
		k := fmt.Sprint(s.Locations)
		if other, ok := seen[k]; ok {
			t.Errorf("stacks %d and %d both hold %v", other, id, s.Locations)
		}
		seen[k] = id
	}
	t.Logf("%d stacks, %d written with a parent", records, parents)
}
