package heap

import "github.com/heaplens/heaplens/internal/capture"

// WindowViews are what a time window of a run did (capture.Window): what
// it allocated, the moment within it when the blocks it allocated were
// highest (Peak), and those still live at its end (Leaks).
type WindowViews struct {
	Allocs, Peak, Leaks *Profile
}

// Window computes the views of the window [from, until] (CLOCK_MONOTONIC)
// of the streams opt covers.
func Window(c *capture.Capture, opt Options, from, until int64) WindowViews {
	w := c.Window(from, until)
	leaks := Live(w, opt, until)
	leaks.View = "leaks"
	return WindowViews{Allocs: Allocs(w, opt), Peak: Peak(w, opt), Leaks: leaks}
}
