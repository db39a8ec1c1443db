package launch

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/heaplens/heaplens/internal/capture"
)

// rssSampler reads the resident set size and its high-water mark of every
// profiled process that is still running from /proc/PID/status and writes
// them as capture RSS records.
type rssSampler struct {
	clock int64  // the processes' CLOCK_MONOTONIC less heaplens's (a time namespace's)
	peak  uint64 // highest sum over processes of one sampling round
	// highWater notes each stream's latest high-water mark, for its End
	// (collect.Collector.HighWater); nil: not noted.
	highWater func(stream uint32, bytes uint64)
}

func newRSSSampler() *rssSampler { return &rssSampler{} }

// sample reads the RSS of each live stream's process and writes one record
// each, all stamped with the same time. Processes already gone are skipped.
// The backed part of a stream's ring (ring(stream)) is resident in its
// process but heaplens's, not the program's: it is left out. high says the
// sum is a new high by riseToRead or more, when the pages of the large
// blocks are worth reading at once (the resident view's moment).
func (s *rssSampler) sample(w *capture.Writer, live map[uint32]int, ring func(stream uint32) uint64) (high bool, err error) {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	now := ts.Nano() + s.clock
	var sum uint64
	for stream, pid := range live {
		// The ring's pages on both sides of the reading, as they grow
		// while the library backs it (a whole ring as a seccomp filter
		// goes in): the mean is what the reading saw, within half of what
		// was backed meanwhile.
		before := ring(stream)
		rss, hwm, ok := readStatus(pid)
		if !ok {
			continue
		}
		rss -= min((before+ring(stream))/2, rss)
		sum += rss
		if s.highWater != nil && hwm > 0 {
			s.highWater(stream, hwm)
		}
		if err := w.RSS(&capture.RSS{Stream: stream, TimeNano: now, Bytes: rss, HighWater: hwm}); err != nil {
			return false, err
		}
	}
	high = float64(sum) >= riseToRead*float64(s.peak) && sum > s.peak
	s.peak = max(s.peak, sum)
	return high, nil
}

// riseToRead is how much higher than the last high the RSS sum must be for
// the agent to read residency at once, beside its reading once a second:
// at most once a poll while RSS grows, never while it stays.
const riseToRead = 1.05

// readStatus returns the resident bytes of pid and the kernel's high-water
// mark of them (VmRSS, VmHWM), false when the process is gone or a zombie
// (whose status has no Vm lines).
func readStatus(pid int) (rss, hwm uint64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	rss, ok = statusKiB(data, "VmRSS:")
	if !ok || rss == 0 {
		return 0, 0, false
	}
	hwm, _ = statusKiB(data, "VmHWM:")
	return rss, hwm, true
}

// statusKiB returns the value of a "Name:   123 kB" line of
// /proc/PID/status, in bytes.
func statusKiB(data []byte, name string) (uint64, bool) {
	i := bytes.Index(data, []byte("\n"+name))
	if i < 0 {
		return 0, false
	}
	line := data[i+1+len(name):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) < 1 {
		return 0, false
	}
	kib, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0, false
	}
	return kib << 10, true
}
