package collect

import "time"

// SetMaxRSS records wait4's ru_maxrss of the command (the first pid
// awaited), for its last image's End.
func (c *Collector) SetMaxRSS(bytes uint64) { c.maxRSS = bytes }

// HighWater notes the kernel's high-water mark of a running stream's RSS
// (VmHWM), read by the agent: what its End says when the process leaves no
// exit mark (_exit, a signal, an exec).
func (c *Collector) HighWater(stream uint32, bytes uint64) {
	// Stream n is c.order[n-1] (discover numbers them so).
	if i := int(stream) - 1; i >= 0 && i < len(c.order) && !c.order[i].ended {
		c.order[i].highWater = max(c.order[i].highWater, bytes)
	}
}

// Young reports whether a running stream started less than d ago: its RSS
// is worth reading at every poll, so that a short run has a timeline.
func (c *Collector) Young(d time.Duration) bool {
	now := c.now()
	for _, s := range c.order {
		if !s.ended && s.r != nil && now-s.hdr.StartMonoNano < int64(d) {
			return true
		}
	}
	return false
}
