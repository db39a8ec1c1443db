package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The file format is defined in docs/capture-format.md; this file (framing
// and field encodings) and records.go (record bodies) are its
// implementation and must change together with it.

// Magic is the first 8 bytes of every capture file.
const Magic = "HEAPLENS"

// Version is the capture format version this package writes and the newest it
// reads. Adding a record type or appending fields to a record body does not
// change it (see docs/capture-format.md, "Versioning").
//
// Version 2 writes the time and address of Alloc and Free records relative to
// the chunk's previous Alloc or Free (eventBase); version 1 wrote them whole.
// Version 3 may name a stack by an earlier one, its parent (Stack.Parent):
// a reader of version 2 would take such a stack for its own locations alone.
const Version uint32 = 3

// eventBase is what an Alloc or Free record's time and address are written
// relative to, from version 2 on: the previous Alloc or Free of the chunk,
// zero at a chunk's start. Consecutive events are close in time and often
// in address, so their deltas take 1-3 bytes where the values take 6-9: at
// --rate 1 the records are half as long and compress twice as fast.
type eventBase struct {
	time int64
	addr uint64
}

// put appends t and addr relative to the base and moves the base to them.
func (e *eventBase) put(b []byte, t int64, addr uint64) []byte {
	b = binary.AppendVarint(b, t-e.time)
	b = binary.AppendVarint(b, int64(addr-e.addr))
	e.time, e.addr = t, addr
	return b
}

// next moves the base on by the deltas put wrote and returns the event's
// time and address. Deltas wrap, so every value round-trips.
func (e *eventBase) next(dt, daddr int64) (int64, uint64) {
	e.time += dt
	e.addr += uint64(daddr)
	return e.time, e.addr
}

// HeaderSize is the size of the file header: magic, u32 version, u32 flags.
const HeaderSize = 16

// chunkHeaderSize is the size of a chunk's framing: u32 length, u32 CRC-32C.
const chunkHeaderSize = 8

// Limits that keep a corrupt file from causing absurd allocations.
const (
	// MaxChunkPayload bounds a chunk's compressed and decompressed size.
	MaxChunkPayload = 64 << 20
	// MaxRecordBody bounds one record body.
	MaxRecordBody = 16 << 20
	// chunkTarget is the uncompressed size at which the writer starts a
	// new chunk: big enough for zstd to find redundancy across thousands of
	// records, small enough that a damaged chunk loses little.
	chunkTarget = 1 << 20
)

// RecordType identifies a record inside a chunk payload.
type RecordType uint8

// Record types. Values are part of the file format and never reused; 0 is
// reserved. Readers skip types they do not know.
const (
	RecMeta     RecordType = 1
	RecProcess  RecordType = 2
	RecMapping  RecordType = 3
	RecLocation RecordType = 4
	RecStack    RecordType = 5
	RecAlloc    RecordType = 6
	RecFree     RecordType = 7
	RecEnd      RecordType = 8
	RecRSS      RecordType = 9
	RecOrigin   RecordType = 10
	RecNote     RecordType = 11
	RecMark     RecordType = 12
	RecMalloc   RecordType = 13
	RecResident RecordType = 14
)

// String returns the record type's name, or "type(N)" for unknown types.
func (t RecordType) String() string {
	if t.known() {
		return recordTypes[t].name
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// errShort and friends describe why a body failed to decode.
var (
	errShort    = errors.New("body too short")
	errVarint   = errors.New("malformed varint")
	errRange    = errors.New("value out of range")
	errCount    = errors.New("count exceeds remaining bytes")
	errZeroID   = errors.New("ID 0 is reserved")
	errBodySize = errors.New("body length exceeds limit or remaining payload")
)

// A codec writes or reads one record body with the field encodings of
// docs/capture-format.md. Each record type lists its fields once, in its
// code method (records.go), and that one list both encodes a record
// (appending to b) and decodes one (reading b): the two cannot disagree.
//
// Decoding, the first error sticks and every later read yields zero, so
// a body is checked once at its end; bytes after the known fields are
// ignored: they are fields appended by a newer writer. Encoding allocates
// nothing when b has room.
type codec struct {
	b     []byte     // encoding: the body so far; decoding: what is left of it
	dec   bool       // decoding
	err   error      // the first error
	base  *eventBase // what event times and addresses are relative to; nil: whole (version 1)
	short int        // decoding: names cut to MaxName
}

func (c *codec) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.b = nil
}

// bad fails on a varint that binary.Uvarint or Varint could not read (n).
func (c *codec) bad(n int) {
	if n == 0 {
		c.fail(errShort)
	} else {
		c.fail(errVarint)
	}
}

// more says whether optional fields appended later follow: encoding,
// whether they are set (present); decoding, whether bytes remain.
func (c *codec) more(present bool) bool {
	if c.dec {
		return len(c.b) > 0
	}
	return present
}

// getUvarint decodes a uvarint of at most max.
func (c *codec) getUvarint(max uint64) uint64 {
	v, n := binary.Uvarint(c.b)
	switch {
	case n <= 0:
		c.bad(n)
		return 0
	case v > max:
		c.fail(errRange)
		return 0
	}
	c.b = c.b[n:]
	return v
}

// unsigned codes a uvarint field; a value its type cannot hold makes the
// body bad. (Encoding is inlined: most fields of the hot records, Alloc
// and Free, are written here.)
func unsigned[T ~uint8 | ~uint32 | ~uint64](c *codec, v *T) {
	if c.dec {
		*v = T(c.getUvarint(uint64(^T(0))))
		return
	}
	c.b = binary.AppendUvarint(c.b, uint64(*v))
}

// signed codes a varint field.
func signed[T ~int | ~int64](c *codec, v *T) {
	if !c.dec {
		c.b = binary.AppendVarint(c.b, int64(*v))
		return
	}
	x, n := binary.Varint(c.b)
	switch {
	case n <= 0:
		c.bad(n)
	case int64(T(x)) != x:
		c.fail(errRange)
		x = 0
	default:
		c.b = c.b[n:]
	}
	*v = T(x)
}

// id codes an ID field, which is never 0.
func (c *codec) id(v *uint64) {
	unsigned(c, v)
	if *v == 0 && c.err == nil {
		c.fail(errZeroID)
	}
}

// event codes an event's time and address: relative to the chunk's
// previous event (c.base, version 2), or whole (version 1).
func (c *codec) event(t *int64, addr *uint64) {
	switch {
	case !c.dec:
		c.b = c.base.put(c.b, *t, *addr)
	case c.base == nil:
		signed(c, t)
		unsigned(c, addr)
	default:
		var dt, da int64
		signed(c, &dt)
		signed(c, &da)
		*t, *addr = c.base.next(dt, da)
	}
}

// flags codes booleans as the bits of one uvarint, the first lowest.
func (c *codec) flags(bits ...*bool) {
	var f uint64
	for i, b := range bits {
		if *b {
			f |= 1 << i
		}
	}
	unsigned(c, &f)
	for i, b := range bits {
		*b = f&(1<<i) != 0
	}
}

func (c *codec) string(s *string) {
	if !c.dec {
		c.b = binary.AppendUvarint(c.b, uint64(len(*s)))
		c.b = append(c.b, *s...)
		return
	}
	n := c.getUvarint(math.MaxUint64)
	if n > uint64(len(c.b)) {
		c.fail(errShort)
	}
	if c.err != nil {
		return
	}
	*s = string(c.b[:n])
	c.b = c.b[n:]
}

// name codes a function, file or module name, which decoding cuts to
// MaxName bytes.
func (c *codec) name(s *string) {
	c.string(s)
	if c.dec && len(*s) > MaxName {
		*s = shortName(*s)
		c.short++
	}
}

// slice codes a count, then that many elements. Decoding rejects a count
// that the remaining bytes could not hold at minSize bytes an element, so
// that a corrupt count never drives a large allocation.
func slice[T any](c *codec, s *[]T, minSize int, code func(*codec, *T)) {
	n := uint64(len(*s))
	unsigned(c, &n)
	if c.dec {
		if c.err != nil || n == 0 {
			return
		}
		if n > uint64(len(c.b)/minSize) {
			c.fail(errCount)
			return
		}
		*s = make([]T, n)
	}
	for i := range *s {
		code(c, &(*s)[i])
	}
}
