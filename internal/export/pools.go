package export

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
	"github.com/heaplens/heaplens/internal/stack"
)

// Attribution names how the bytes of a stack were charged to the code that
// asked for them: "self" for a thread's own allocations, else the method
// that tied a pool worker's allocation to its origin (see
// docs/pool-attribution.md).
func Attribution(c *capture.Capture, stackID uint64) string {
	return capture.MethodNames[stack.Method(c, stackID)]
}

// poolNote sums the view's bytes made on pool workers by method, or "".
func poolNote(c *capture.Capture, p *heap.Profile) string {
	by := map[uint8]float64{}
	for _, s := range p.Samples {
		if m := stack.Method(c, s.StackID); m != capture.MethodSelf {
			by[m] += s.Bytes
		}
	}
	if len(by) == 0 {
		return ""
	}
	var parts []string
	for m := capture.MethodAPI; m <= capture.MethodCreator; m++ {
		if b, ok := by[m]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", size.Human(b), methodPhrase[m]))
		}
	}
	return "pool workers: " + strings.Join(parts, ", ")
}

var methodPhrase = map[uint8]string{
	capture.MethodAPI:          "declared by the pool (api)",
	capture.MethodOpenMP:       "from OpenMP regions (openmp)",
	capture.MethodFallback:     "guessed: the one Python thread waiting (fallback)",
	capture.MethodUnattributed: "unattributed (several or no Python threads waiting)",
	capture.MethodCreator:      "charged to the code that created the thread (creator)",
}
