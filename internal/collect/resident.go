package collect

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/ring"
)

// Large sampled blocks whose residency the agent reads (ReadResidency).
const (
	residentMin    = 1 << 20 // smaller blocks: their size is what they take, near enough
	residentBlocks = 64      // per process and reading, the largest
	// residentPages bounds the pages looked at in one reading of all
	// processes (8 bytes of pagemap each: 8 MiB read, 4 GiB of address
	// space at 4 KiB pages); blocks past it keep their last reading.
	residentPages = 1 << 20
	// pagemap entry bits: the page is in memory, or in swap.
	pagePresent = 1 << 63
	pageSwapped = 1 << 62
)

// bigBlocks are a process's live sampled blocks of residentMin bytes or
// more: address → size.
type bigBlocks map[uint64]uint64

// ReadResidency writes a Resident record for each of the largest live
// sampled blocks of every running process: how many of their pages are in
// memory (or swap), from /proc/PID/pagemap, which the owner of a process
// may read (the page frame numbers, which need privileges, are not used).
// A process that is gone, or whose pagemap cannot be read, is skipped.
func (c *Collector) ReadResidency() error {
	now := c.now()
	budget := uint64(residentPages)
	for _, s := range c.order {
		if s.ended || s.r == nil || len(s.big) == 0 {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", s.host))
		if err != nil {
			continue
		}
		type block struct{ addr, size uint64 }
		var bs []block
		for a, n := range s.big {
			bs = append(bs, block{a, n})
		}
		slices.SortFunc(bs, func(x, y block) int { return cmp.Or(cmp.Compare(y.size, x.size), cmp.Compare(x.addr, y.addr)) })
		for _, b := range bs[:min(len(bs), residentBlocks)] {
			pages := b.size/pageSize + 1
			if pages > budget {
				continue
			}
			budget -= pages
			res, span, ok := resident(f, b.addr, b.size, &c.pagemap)
			if !ok {
				continue
			}
			if err := c.w.Resident(&capture.Resident{Stream: s.id, TimeNano: now, Addr: b.addr, Size: span, Resident: res}); err != nil {
				f.Close()
				return fmt.Errorf("collect: %w", err)
			}
		}
		f.Close()
	}
	return nil
}

// resident counts the resident bytes of the pages [addr, addr+size) spans.
var pageSize = uint64(os.Getpagesize())

func resident(f *os.File, addr, size uint64, buf *[]byte) (res, span uint64, ok bool) {
	first, last := addr/pageSize, (addr+size-1)/pageSize
	n := last - first + 1
	if cap(*buf) < 8*int(min(n, 1<<16)) {
		*buf = make([]byte, 8*min(n, 1<<16))
	}
	for page := first; page <= last; {
		chunk := min(last-page+1, uint64(cap(*buf)/8))
		b := (*buf)[:8*chunk]
		if k, err := f.ReadAt(b, int64(page*8)); err != nil || k != len(b) {
			return 0, 0, false
		}
		for i := 0; i < len(b); i += 8 {
			if binary.LittleEndian.Uint64(b[i:])&(pagePresent|pageSwapped) != 0 {
				res += pageSize
			}
		}
		page += chunk
	}
	return res, n * pageSize, true
}

// publishResident lists, in the ring of every running stream whose large
// blocks changed since, its ring.ResidentBlocks largest live sampled
// blocks: the library counts their resident pages at exit(), after which
// /proc/PID/pagemap can no longer be read (residentAtExit).
func (c *Collector) publishResident() {
	for _, s := range c.order {
		if s.ended || s.r == nil {
			continue
		}
		fp := uint64(len(s.big))
		for a, n := range s.big {
			fp += a*0x9e3779b97f4a7c15 ^ n // order-free: a sum
		}
		if fp == s.published {
			continue
		}
		s.published = fp
		bs := make([][2]uint64, 0, len(s.big))
		for a, n := range s.big {
			bs = append(bs, [2]uint64{a, n})
		}
		slices.SortFunc(bs, func(x, y [2]uint64) int { return cmp.Or(cmp.Compare(y[1], x[1]), cmp.Compare(x[0], y[0])) })
		s.r.SetResidentBlocks(bs)
	}
}

// residentAtExit writes the Resident record of a block the library
// counted at exit(), if the block is one of the stream's live large ones
// and the record's span is its pages (an entry the library read torn is
// not).
func (c *Collector) residentAtExit(s *stream, rec *ring.Record) error {
	n, ok := s.big[rec.Addr]
	if !ok || rec.Size < n || rec.Size > n+2*pageSize || rec.Value > rec.Size {
		return nil
	}
	return c.w.Resident(&capture.Resident{Stream: s.id, TimeNano: rec.TimeNano, Addr: rec.Addr, Size: rec.Size, Resident: rec.Value})
}
