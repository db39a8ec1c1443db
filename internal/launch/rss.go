package launch

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/heaplens/heaplens/internal/capture"
)

// rssSampler reads the resident set size of every profiled process that is
// still running from /proc/PID/statm and writes it as capture RSS records.
type rssSampler struct {
	pageSize uint64
	peak     uint64 // highest sum over processes of one sampling round
}

func newRSSSampler() *rssSampler {
	return &rssSampler{pageSize: uint64(os.Getpagesize())}
}

// sample reads the RSS of each live stream's process and writes one record
// each, all stamped with the same time. Processes already gone are skipped.
// The backed part of a stream's ring (ring(stream)) is resident in its
// process but heaplens's, not the program's: it is left out.
func (s *rssSampler) sample(w *capture.Writer, live map[uint32]int, ring func(stream uint32) uint64) error {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	now := ts.Nano()
	var sum uint64
	for stream, pid := range live {
		b, ok := s.read(pid)
		if !ok {
			continue
		}
		if r := ring(stream); r < b {
			b -= r
		}
		sum += b
		if err := w.RSS(&capture.RSS{Stream: stream, TimeNano: now, Bytes: b}); err != nil {
			return err
		}
	}
	s.peak = max(s.peak, sum)
	return nil
}

// read returns the resident bytes of pid, false when the process is gone
// or a zombie (whose statm reads as zeros).
func (s *rssSampler) read(pid int) (uint64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(data)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil || pages == 0 {
		return 0, false
	}
	return pages * s.pageSize, true
}
