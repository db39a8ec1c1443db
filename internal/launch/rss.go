package launch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
)

// rssSampler reads the resident set size of every profiled process from
// /proc/PID/statm and writes it as capture RSS records.
//
// RSS records name streams, whose IDs the collector assigns in discovery
// order: ring files sorted by (StartMonoNano, Seq) within each discovery.
// The sampler mirrors that order by reading the headers of the ring files
// the collector has just discovered (it runs right after Poll in the same
// loop), so the k new streams of a poll are the first k new ready rings.
type rssSampler struct {
	dir      string
	assigned map[string]bool
	streams  int            // streams assigned so far
	byPID    map[int]uint32 // pid -> its newest stream (an exec starts a new one)
	seqOf    map[int]uint32
	pageSize uint64
	peak     uint64 // highest sum over processes of one sampling round
}

func newRSSSampler(dir string) *rssSampler {
	return &rssSampler{dir: dir, assigned: map[string]bool{}, byPID: map[int]uint32{},
		seqOf: map[int]uint32{}, pageSize: uint64(os.Getpagesize())}
}

// sync learns the streams the collector created since the last call; total
// is the collector's stream count.
func (s *rssSampler) sync(total int) {
	if total <= s.streams {
		return
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	type cand struct {
		name string
		h    ring.Header
	}
	var fresh []cand
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "ring.") || s.assigned[name] {
			continue
		}
		r, err := ring.Open(filepath.Join(s.dir, name))
		if err != nil {
			if !errors.Is(err, ring.ErrNotReady) {
				s.assigned[name] = true // the collector gave up on it too
			}
			continue
		}
		fresh = append(fresh, cand{name, r.Header()})
		r.Close()
	}
	slices.SortFunc(fresh, func(a, b cand) int {
		if a.h.StartMonoNano != b.h.StartMonoNano {
			if a.h.StartMonoNano < b.h.StartMonoNano {
				return -1
			}
			return 1
		}
		return int(a.h.Seq) - int(b.h.Seq)
	})
	for _, c := range fresh {
		if s.streams >= total {
			break
		}
		s.streams++
		s.assigned[c.name] = true
		if old, ok := s.seqOf[c.h.PID]; !ok || c.h.Seq >= old {
			s.byPID[c.h.PID] = uint32(s.streams)
			s.seqOf[c.h.PID] = c.h.Seq
		}
	}
}

// sample reads the RSS of every known process and writes one record each,
// all stamped with the same time. Processes that are gone are skipped.
func (s *rssSampler) sample(w *capture.Writer) error {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	now := ts.Nano()
	var sum uint64
	for pid, stream := range s.byPID {
		b, ok := s.read(pid)
		if !ok {
			continue
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
