package heap

import "github.com/heaplens/heaplens/internal/capture"

// HighWater is the kernel's own figure for the most memory the covered
// processes held resident: exact, where the RSS series is read now and
// then and misses whatever a short run or a short burst touched between
// two readings.
type HighWater struct {
	// Bytes is the command's ru_maxrss (from wait4, as /usr/bin/time's %M)
	// when Command is set, else the largest high-water mark of one
	// process image (its VmHWM, or ru_maxrss at its exit).
	Bytes   uint64
	Command bool
	Stream  uint32 // whose mark Bytes is, when not Command
	Images  int    // covered process images whose mark is known
	// Ring bounds heaplens's own part of Bytes: the largest ring resident
	// in one of the processes Bytes may be of (capture.End.Ring).
	Ring uint64
}

// HighWaterOf returns the covered streams' high-water mark, from their End
// records and the agent's readings of VmHWM; Bytes is 0 when the capture
// has none (captures from before they were recorded).
func HighWaterOf(c *capture.Capture, opt Options) HighWater {
	per := map[uint32]uint64{}
	for i := range c.RSS {
		if r := &c.RSS[i]; opt.keep(r.Stream) && r.HighWater > per[r.Stream] {
			per[r.Stream] = r.HighWater
		}
	}
	var hw HighWater
	var command uint64
	var largestOther uint64 // the largest mark of an image other than the one wait4 reports on
	for s, e := range c.Ends {
		if !opt.keep(s) {
			continue
		}
		per[s] = max(per[s], e.HighWater)
		// wait4's figure is the whole command's only when no stream is
		// left out (with --pid it may be another process's).
		if opt.Streams == nil {
			command = max(command, e.MaxRSS)
		}
	}
	for s, b := range per {
		if b == 0 {
			continue
		}
		hw.Images++
		if b > hw.Bytes || (b == hw.Bytes && s < hw.Stream) {
			hw.Bytes, hw.Stream = b, s
		}
		if e := c.Ends[s]; e == nil || e.MaxRSS == 0 {
			largestOther = max(largestOther, b)
		}
	}
	// ru_maxrss covers the command's images (its own mark, read at exit(),
	// may differ by a few pages) and the descendants it reaped, not those
	// reparented elsewhere: an image above it is the one to name.
	if command > 0 && command >= largestOther {
		hw.Bytes, hw.Command, hw.Stream = command, true, 0
		for s, e := range c.Ends {
			if opt.keep(s) {
				hw.Ring = max(hw.Ring, e.Ring)
			}
		}
	} else if e := c.Ends[hw.Stream]; e != nil && hw.Bytes > 0 {
		hw.Ring = e.Ring
	}
	return hw
}

// HighWater is HighWaterOf the replay's capture and streams.
func (rp *Replay) HighWater() HighWater { return HighWaterOf(rp.c, Options{Streams: rp.covered}) }

// HighWaters returns each stream's own high-water mark of RSS: its exit
// mark or the agent's highest VmHWM reading (not wait4's figure, which
// may cover descendants); streams without one are absent.
func HighWaters(c *capture.Capture) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for i := range c.RSS {
		if r := &c.RSS[i]; r.HighWater > out[r.Stream] {
			out[r.Stream] = r.HighWater
		}
	}
	for s, e := range c.Ends {
		if e.HighWater > out[s] {
			out[s] = e.HighWater
		}
	}
	return out
}
