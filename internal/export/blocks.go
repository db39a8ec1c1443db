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
	// One row per site and function: 64 blocks of one loop are one row.
	type row struct {
		label              string
		resident, reserved uint64
		n                  int
		stale              int64 // the oldest stale reading's time, 0 if none
	}
	var rows []*row
	at := map[string]*row{}
	for _, x := range own {
		user, _ := UserFrame(c, x.Alloc.StackID)
		label := user + " by " + capture.FuncNames[x.Alloc.Func]
		r := at[label]
		if r == nil {
			r = &row{label: label}
			at[label] = r
			rows = append(rows, r)
		}
		r.resident += min(x.Resident, x.Alloc.Size)
		r.reserved += x.Alloc.Size
		r.n++
		if x.Stale && (r.stale == 0 || x.ReadAt < r.stale) {
			r.stale = x.ReadAt
		}
	}
	slices.SortStableFunc(rows, func(x, y *row) int {
		return cmp.Or(cmp.Compare(y.resident, x.resident), cmp.Compare(y.reserved, x.reserved), cmp.Compare(x.label, y.label))
	})
	fmt.Fprintf(b, "  %s (%s of the %s they reserve resident):\n", title, size.Human(resident), size.Human(reserved))
	for i, r := range rows[:min(len(rows), blocksShown)] {
		blocks := ""
		if r.n > 1 {
			blocks = fmt.Sprintf(" in %d sampled blocks", r.n)
		}
		when := ""
		if r.stale != 0 {
			when = fmt.Sprintf(", not read since %.3f s", float64(r.stale-start)/1e9)
		}
		fmt.Fprintf(b, "    %d. %10s resident of %s reserved%s%s  %s\n", i+1, size.Human(float64(r.resident)),
			size.Human(float64(r.reserved)), blocks, when, r.label)
	}
}

// negativeRest says what a negative rest means: the heap counts blocks at
// their size, RSS only the pages touched.
func negativeRest(rest float64) string {
	if rest >= 0 {
		return ""
	}
	return " (negative: the live heap counts reserved pages never touched, which RSS does not; --view resident counts them as RSS does)"
}
