package launch

import (
	"bytes"
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
)

// rssSampler reads the resident set size of every profiled process from
// /proc/PID/statm and writes it as capture RSS records.
//
// RSS records name streams, whose IDs the collector assigns in discovery
// order: the ring files it finds in one Poll, sorted by (StartMonoNano,
// Seq), numbered after the streams it already has. The collector unlinks a
// ring file once it has mapped it and does not export which pid a stream
// is, so the sampler reads the headers of the ready ring files just before
// each Poll (scan), and after it (sync) takes the files the collector
// consumed as that Poll's new streams. When their number differs from the
// collector's count (a ring became ready between the two directory reads)
// that batch gets no RSS rather than a wrong one.
type rssSampler struct {
	dir      string
	seen     map[string]bool // ring files read, as name@inode
	pending  []ringFile      // read, not yet consumed by the collector
	streams  int             // streams the collector had at the last sync
	byPID    map[int]uint32  // pid -> its newest stream (an exec starts a new one)
	seqOf    map[int]uint32
	pageSize uint64
	peak     uint64 // highest sum over processes of one sampling round
}

type ringFile struct {
	path, key string
	h         ring.Header
}

func newRSSSampler(dir string) *rssSampler {
	return &rssSampler{dir: dir, seen: map[string]bool{}, byPID: map[int]uint32{},
		seqOf: map[int]uint32{}, pageSize: uint64(os.Getpagesize())}
}

// fileKey names a ring file as the collector does: a name returns after
// an exec restarts the numbering, an inode does not while mapped.
func fileKey(path string) (string, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return "", false
	}
	return filepath.Base(path) + "@" + strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10), true
}

// scan reads the headers of ready ring files not read before. Call it just
// before the collector's Poll.
func (s *rssSampler) scan() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "ring.") {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		key, ok := fileKey(path)
		if !ok || s.seen[key] {
			continue
		}
		r, err := ring.Open(path)
		if err != nil {
			if !errors.Is(err, ring.ErrNotReady) {
				s.seen[key] = true // the collector gives up on it too
			}
			continue
		}
		s.seen[key] = true
		s.pending = append(s.pending, ringFile{path, key, r.Header()})
		r.Close()
	}
}

// sync learns the streams the collector created in the Poll just done;
// total is the collector's stream count.
func (s *rssSampler) sync(total int) {
	var consumed, still []ringFile
	for _, f := range s.pending {
		if key, ok := fileKey(f.path); ok && key == f.key {
			still = append(still, f)
		} else {
			consumed = append(consumed, f)
		}
	}
	s.pending = still
	if n := total - s.streams; n > 0 && n == len(consumed) {
		slices.SortFunc(consumed, func(a, b ringFile) int {
			if c := cmp.Compare(a.h.StartMonoNano, b.h.StartMonoNano); c != 0 {
				return c
			}
			return cmp.Compare(a.h.Seq, b.h.Seq)
		})
		for i, f := range consumed {
			if old, ok := s.seqOf[f.h.PID]; !ok || f.h.Seq >= old {
				s.byPID[f.h.PID] = uint32(s.streams + i + 1)
				s.seqOf[f.h.PID] = f.h.Seq
			}
		}
	}
	s.streams = max(s.streams, total)
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
