package export

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"

	"github.com/heaplens/heaplens/internal/capture"
)

// blocksShown is how many large blocks a summary ranks by resident bytes.
const blocksShown = 3

// residentBlocks writes, under title, the large blocks of bs ranked by
// their resident bytes with the bytes they reserve beside them, when a
// tenth or more of what they reserve is not resident (else the sites
// above already say what they take). Helpers' blocks are left out. A
// reading older than the moment is said to be.
func residentBlocks(b *strings.Builder, c *capture.Capture, title string, bs []heap.BlockResidency, helpers map[uint32]bool, start int64) {
	var own []heap.BlockResidency
	var reserved, resident float64
	for _, x := range bs {
		if !helpers[x.Alloc.Stream] {
			own = append(own, x)
			reserved += float64(x.Alloc.Size)
			resident += float64(min(x.Resident, x.Alloc.Size))
		}
	}
	if len(own) == 0 || reserved-resident < reserved/10 {
		return
	}
	slices.SortStableFunc(own, func(x, y heap.BlockResidency) int {
		return cmp.Or(cmp.Compare(y.Resident, x.Resident), cmp.Compare(y.Alloc.Size, x.Alloc.Size))
	})
	fmt.Fprintf(b, "  %s (%s of the %s they reserve resident):\n", title, size.Human(resident), size.Human(reserved))
	for i, x := range own[:min(len(own), blocksShown)] {
		user, _ := UserFrame(c, x.Alloc.StackID)
		when := ""
		if x.Stale {
			when = fmt.Sprintf(", not read since %.3f s", float64(x.ReadAt-start)/1e9)
		}
		fmt.Fprintf(b, "    %d. %10s resident of %s reserved%s  %s by %s\n", i+1, size.Human(float64(x.Resident)),
			size.Human(float64(x.Alloc.Size)), when, user, capture.FuncNames[x.Alloc.Func])
	}
}
