package collect

import "golang.org/x/sys/unix"

// monoNow reads the clock the library stamps records with.
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
