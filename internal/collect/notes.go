package collect

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/size"
)

// maxNotes is how many processes the warnings name one by one (a fork
// storm in a small /dev/shm has hundreds).
const maxNotes = 10

// unprofiledMarker reads the empty file unprofiled.<pid>.<errno>.<bytes>.<comm>
// that the library leaves when it cannot make a ring: that process ran on
// without profiling. It reports whether name is such a marker.
func (c *Collector) unprofiledMarker(name string) bool {
	rest, ok := strings.CutPrefix(name, "unprofiled.")
	if !ok {
		return false
	}
	os.Remove(filepath.Join(c.dir, name)) // counted once
	f := strings.SplitN(rest, ".", 4)
	if len(f) != 4 {
		return true
	}
	pid, err1 := strconv.Atoi(f[0])
	errno, err2 := strconv.ParseUint(f[1], 10, 16)
	bytes, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return true
	}
	if c.marked == nil {
		c.marked = map[int]bool{}
	}
	c.marked[pid] = true
	if errno > sanitizerMarker && errno <= sanitizerMarker+uint64(len(sanitizers)) {
		c.note("process %d (%s) ran unprofiled: it is built with %s, whose runtime owns the allocator and must come first; "+
			"it was restarted as it was started, without heaplens's library", pid, f[3], sanitizers[errno-sanitizerMarker-1])
		return true
	}
	if errno == asLimitMarker {
		c.note("process %d (%s) ran unprofiled: its address-space limit (RLIMIT_AS, ulimit -v) of %s leaves no room for even the smallest ring (%s at 1/256 of it)",
			pid, f[3], size.FormatSize(bytes), size.FormatSize(64<<10))
		return true
	}
	c.note("process %d (%s) ran unprofiled: could not back even the start of a ring of %s in %s: %v",
		pid, f[3], size.FormatSize(bytes), c.dir, unix.Errno(errno))
	return true
}

// asLimitMarker, in place of an errno, is the marker of a process whose
// address-space limit (its bytes field) leaves no room for a ring
// (preload/limits.c, HL_UNPROFILED_ASLIMIT).
const asLimitMarker = 4200

// sanitizerMarker + kind, in place of an errno, is the marker of a process
// that found a sanitizer runtime in itself and restarted without the
// library (preload/sanitizer.c, HL_UNPROFILED_SANITIZER); kind is 1-based
// in sanitizers, the order of its runtimes.
const sanitizerMarker = 4096

var sanitizers = []string{"AddressSanitizer", "ThreadSanitizer", "LeakSanitizer", "MemorySanitizer", "HWAddressSanitizer",
	"AddressSanitizer", "ThreadSanitizer", "LeakSanitizer", "MemorySanitizer", "HWAddressSanitizer"}

func command(h ring.Header) string {
	if len(h.Cmdline) > 0 {
		return filepath.Base(h.Cmdline[0])
	}
	return filepath.Base(h.Exe)
}

// ringNotes warns about a ring the library had to compromise on.
func (c *Collector) ringNotes(h ring.Header) {
	if c.RingSize != 0 && h.DataSize < c.RingSize && !h.Attached {
		c.warn("processes under an address-space limit (RLIMIT_AS, ulimit -v) had rings of %s, not %s, as a ring counts against that limit: "+
			"they may have dropped more records", size.FormatSize(h.DataSize), size.FormatSize(c.RingSize))
	}
	if h.NoUnwind {
		c.note("process %d (%s) was forked while another thread was unwinding: its samples have no native frames, as the unwinder's locks may stay held in it",
			h.PID, command(h))
	}
}

// backingNote warns about a ring whose backing the file system stopped
// while the process ran: the ring could not wrap, so everything it would
// have recorded from then on was dropped (and counted). The command heaplens
// runs is named even past maxNotes (its children may fill the list first).
func (c *Collector) backingNote(s *stream, cnt ring.Counters) {
	stopped, backed, errno := s.r.Backing()
	if !stopped {
		return
	}
	say := c.note
	if s.hdr.PID == c.root {
		say = c.warn
	}
	say("process %d (%s) filled %s: its ring could be backed only to %s of %s (%v); "+
		"its samples after that point were dropped and counted (%d allocations, %d frees, %d other records)",
		s.hdr.PID, command(s.hdr), c.dir, size.FormatSize(backed), size.FormatSize(s.hdr.DataSize), errno,
		cnt.DroppedAllocs, cnt.DroppedFree, cnt.DroppedOther)
}

// note names a process that ran unprofiled or with less than asked for:
// in the run's warnings (the first maxNotes) and, as a Note record, for
// every report.
func (c *Collector) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.notes = append(c.notes, msg)
	if c.w != nil {
		c.w.Note(&capture.Note{Text: msg}) // a write error surfaces with the next record
	}
}

func (c *Collector) noteWarnings() []string {
	if len(c.notes) <= maxNotes {
		return c.notes
	}
	out := append([]string(nil), c.notes[:maxNotes]...)
	return append(out, fmt.Sprintf("and %d more such notes about other processes", len(c.notes)-maxNotes))
}
