package export

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/size"
)

// A helper is a process image that only led to the program: a shim, a
// shell wrapper, a version manager's subcommands. It exec'd into the next
// image or ended within helperLife of its start, having allocated less
// than helperBytes; summaries fold helpers into one line instead of
// ranking their allocator's bookkeeping beside the program's sites.
const (
	helperLife  = 1e9     // ns
	helperBytes = 4 << 20 // estimated bytes allocated
)

// Helpers are the helper images of a capture: stream → true. allocs is the
// allocs view of the whole capture. The command's last image (the
// program), images whose end is not recorded, and other processes running
// the program's executable (its workers) are never helpers.
func Helpers(c *capture.Capture, allocs *heap.Profile) map[uint32]bool {
	root := commandPID(c)
	bytes := map[uint32]float64{}
	if allocs != nil {
		for _, s := range allocs.Samples {
			bytes[s.Stream] += s.Bytes
		}
	}
	return helpersBy(c, root, bytes)
}

// allocatedBy is the estimated bytes each stream allocated, from a capture
// loaded whole.
func allocatedBy(c *capture.Capture) map[uint32]float64 {
	out := map[uint32]float64{}
	for i := range c.Allocs {
		a := &c.Allocs[i]
		out[a.Stream] += heap.Weight(a.Size, c.Meta.Rate) * float64(a.Size)
	}
	return out
}

// helpersBy is Helpers with the bytes each stream allocated.
func helpersBy(c *capture.Capture, root int, bytes map[uint32]float64) map[uint32]bool {
	var last *capture.Process // the command's last image
	for _, p := range c.Processes {
		if p.PID == root && (last == nil || p.StartMonoNano > last.StartMonoNano) {
			last = p
		}
	}
	out := map[uint32]bool{}
	for _, p := range c.Processes {
		e := c.Ends[p.Stream]
		// The program's own executable in another process is its worker.
		if p == last || e == nil || bytes[p.Stream] >= helperBytes || (last != nil && p.Exe == last.Exe && !e.Exec) {
			continue
		}
		if e.Exec || e.TimeNano-p.StartMonoNano < helperLife {
			out[p.Stream] = true
		}
	}
	if len(out) == len(c.Processes) { // nothing left to show: they are the program
		return nil
	}
	return out
}

var shells = map[string]bool{"bash": true, "sh": true, "dash": true, "zsh": true, "ksh": true}

// commandPID is the pid of the command heaplens ran (or attached to):
// the first process to start.
func commandPID(c *capture.Capture) int {
	if c.Meta.AttachedPID != 0 {
		return c.Meta.AttachedPID
	}
	var first *capture.Process
	for _, p := range c.Processes {
		if first == nil || p.StartMonoNano < first.StartMonoNano {
			first = p
		}
	}
	if first == nil {
		return 0
	}
	return first.PID
}

// withoutStreams is p without the samples of the given streams.
func withoutStreams(p *heap.Profile, drop map[uint32]bool) *heap.Profile {
	if len(drop) == 0 || p == nil {
		return p
	}
	q := *p
	q.Samples = nil
	for _, s := range p.Samples {
		if !drop[s.Stream] {
			q.Samples = append(q.Samples, s)
		}
	}
	return &q
}

// HelperLine is the one line that stands for the helpers in a summary:
// how many, their names, what they held live when each ended, and how to
// see one; "" without helpers.
func HelperLine(c *capture.Capture, helpers map[uint32]bool, leaks *heap.Profile) string {
	if len(helpers) == 0 {
		return ""
	}
	var live float64
	if leaks != nil {
		for _, s := range leaks.Samples {
			if helpers[s.Stream] {
				live += s.Bytes
			}
		}
	}
	seen := map[string]int{}
	pid := 0
	for _, p := range c.Processes {
		if !helpers[p.Stream] {
			continue
		}
		if pid == 0 {
			pid = p.PID
		}
		exe := filepath.Base(p.Exe)
		seen[exe]++
		if shells[exe] && len(p.Cmdline) > 1 && !strings.HasPrefix(p.Cmdline[1], "-") {
			seen[filepath.Base(p.Cmdline[1])]++ // the script the shell ran: pyenv
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(seen[b], seen[a]), cmp.Compare(a, b)) })
	if len(names) > 4 {
		names = append(names[:4], "…")
	}
	return fmt.Sprintf("%d short-lived helper process image(s) (%s): %s live at their exits, not among the sites listed (--pid %d shows one)",
		len(helpers), strings.Join(names, ", "), size.Human(live), pid)
}
