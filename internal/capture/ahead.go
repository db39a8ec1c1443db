package capture

import "math"

// decodedEvent is an Alloc or Free record that ReadAhead's goroutine
// decoded ahead of Next: with the decompression, the decoding of the events
// (most of a capture) then runs beside the caller's work on them.
type decodedEvent struct {
	start, end int32 // the record's bytes in the payload
	a          Alloc // a Free's fields in the Alloc's of the same names
}

// maxDecodedEvents bounds the events decoded ahead per chunk (4 MiB): a
// chunk of 1 MiB holds about 90 000 at --rate 1; a longer one is decoded
// by Next past that, so a chunk of tiny records cannot make a reader
// allocate many times its payload.
const maxDecodedEvents = 1 << 16

// decodeEvents appends the events of payload to dst, up to
// maxDecodedEvents, as Alloc.code and Free.code would decode them, and
// stops before a record that it cannot frame or decode: Next reads that
// one itself, and reports the damage. (FuzzReadAhead holds the two to the
// same results.)
func decodeEvents(payload []byte, version uint32, dst []decodedEvent) []decodedEvent {
	var base eventBase
	var f [allocFields]uint64
	for pos := 0; pos < len(payload) && len(dst) < maxDecodedEvents; {
		t, body, next, err := splitAt(payload, pos)
		if err != nil {
			break
		}
		e := decodedEvent{start: int32(pos), end: int32(next)}
		pos = next
		var n, rest int
		switch t {
		case RecAlloc:
			// Seven fields, then Origin and Method both or neither; more is ignored.
			if n, rest = uvarints(body, f[:]); n < 7 || n == 7 && rest > 0 || n == 8 ||
				n == 9 && f[8] > math.MaxUint8 || f[6] > math.MaxUint8 {
				return dst
			}
			e.a.Size, e.a.StackID, e.a.Func = f[4], f[5], uint8(f[6])
			if n == 9 {
				e.a.Origin, e.a.Method = f[7], uint8(f[8])
			}
		case RecFree:
			if n, _ = uvarints(body, f[:4]); n < 4 {
				return dst
			}
		default:
			continue
		}
		if f[0] > math.MaxUint32 || f[1] > math.MaxUint32 {
			return dst
		}
		e.a.Stream, e.a.TID = uint32(f[0]), uint32(f[1])
		if version < 2 {
			e.a.TimeNano, e.a.Addr = unzigzag(f[2]), f[3]
		} else {
			e.a.TimeNano, e.a.Addr = base.next(unzigzag(f[2]), unzigzag(f[3]))
		}
		dst = append(dst, e)
	}
	return dst
}

// allocFields is the number of fields of an Alloc body.
const allocFields = 9

// uvarints reads up to len(dst) uvarints from b into dst, as
// binary.Uvarint would read them, stopping at the first it cannot; it
// returns how many it read and how many bytes remain after them.
func uvarints(b []byte, dst []uint64) (n, rest int) {
	i := 0
	for n < len(dst) {
		var v uint64
		j := i
		for s := uint(0); ; s += 7 {
			if j == len(b) || s == 70 {
				return n, len(b) - i
			}
			c := b[j]
			j++
			if s == 63 && c > 1 { // past 64 bits
				return n, len(b) - i
			}
			v |= uint64(c&0x7f) << s
			if c < 0x80 {
				break
			}
		}
		dst[n], i = v, j
		n++
	}
	return n, len(b) - i
}

// unzigzag is the value of a zigzag-encoded varint.
func unzigzag(u uint64) int64 {
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}
