package collect

import "golang.org/x/sys/unix"

// monoNow reads CLOCK_MONOTONIC, the clock the library stamps records with
// when it runs in heaplens's time namespace.
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// now is the library's clock: CLOCK_MONOTONIC as the processes read it (in
// a time namespace of their own, offset: SetForeign).
func (c *Collector) now() int64 { return monoNow() + c.clockOffset }
