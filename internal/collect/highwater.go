package collect

// SetMaxRSS records wait4's ru_maxrss of the command (the first pid
// awaited), for its last image's End.
func (c *Collector) SetMaxRSS(bytes uint64) { c.maxRSS = bytes }

// HighWater notes the kernel's high-water mark of a running stream's RSS
// (VmHWM), read by the agent: what its End says when the process leaves no
// exit mark (_exit, a signal, an exec).
func (c *Collector) HighWater(stream uint32, bytes uint64) {
	for _, s := range c.order {
		if s.id == stream && !s.ended {
			s.highWater = max(s.highWater, bytes)
		}
	}
}
