package collect

import "hash/maphash"

// rawCache maps byte strings (stacks as the library wrote them) to what the
// collector made of them. It is keyed by a hash of the bytes and keeps the
// bytes to compare: a Go map keyed by the strings themselves hashes every key
// again each time it grows, which at --rate 1 cost more than the lookups. A
// hash shared by two strings keeps the later one; the other misses, which
// costs a merge, never a wrong answer. The keys it keeps are bounded by
// maxBytes: past that it starts over.
type rawCache[V any] struct {
	seed     maphash.Seed
	m        map[uint64]rawEntry[V]
	bytes    int
	maxBytes int
}

type rawEntry[V any] struct {
	key string
	v   V
}

func newRawCache[V any](maxBytes int) *rawCache[V] {
	return &rawCache[V]{seed: maphash.MakeSeed(), maxBytes: maxBytes}
}

// get returns the value kept for key and, to put one, the key's hash.
func (c *rawCache[V]) get(key []byte) (v V, h uint64, ok bool) {
	h = maphash.Bytes(c.seed, key)
	e, ok := c.m[h]
	if ok && e.key == string(key) {
		return e.v, h, true
	}
	return v, h, false
}

// put keeps v for key, whose hash get returned.
func (c *rawCache[V]) put(h uint64, key []byte, v V) {
	if old, ok := c.m[h]; ok {
		c.bytes -= len(old.key)
	}
	if c.m == nil || c.bytes+len(key) > c.maxBytes {
		c.m, c.bytes = map[uint64]rawEntry[V]{}, 0
	}
	c.m[h] = rawEntry[V]{string(key), v}
	c.bytes += len(key)
}

// stackIndex maps the Locations of a stack (as mergeStack encodes them) to
// its ID, exactly: keyed by a hash of the bytes, as rawCache, so that the
// map's growth rehashes integers rather than every key's bytes (at --rate
// 1 a real library's program writes hundreds of thousands of stacks); a
// key whose hash another key holds goes to a map keyed by the bytes. The
// keys are kept end to end in large chunks, and the map holds where, not
// pointers: the garbage collector neither scans it nor finds a string per
// stack (py_torch at --rate 1: 896 k stacks, 90 MB of keys).
type stackIndex struct {
	seed   maphash.Seed
	m      map[uint64]keyRef
	more   map[string]uint64
	chunks [][]byte
}

// keyRef is where a key is kept, and its ID.
type keyRef struct {
	chunk, off, n uint32
	id            uint64
}

// keyChunk is the size of a chunk of keys (a longer key gets its own).
const keyChunk = 1 << 20

func newStackIndex() *stackIndex {
	return &stackIndex{seed: maphash.MakeSeed(), m: map[uint64]keyRef{}}
}

// get returns key's ID and, to put one, the key's hash.
func (x *stackIndex) get(key []byte) (id, h uint64, ok bool) {
	h = maphash.Bytes(x.seed, key)
	if e, ok := x.m[h]; ok {
		if int(e.n) == len(key) && string(x.chunks[e.chunk][e.off:e.off+e.n]) == string(key) {
			return e.id, h, true
		}
		id, ok = x.more[string(key)]
		return id, h, ok
	}
	return 0, h, false
}

// put adds key, which get did not find, with its hash.
func (x *stackIndex) put(h uint64, key []byte, id uint64) {
	if _, taken := x.m[h]; taken {
		if x.more == nil {
			x.more = map[string]uint64{}
		}
		x.more[string(key)] = id
		return
	}
	last := len(x.chunks) - 1
	if last < 0 || len(x.chunks[last])+len(key) > cap(x.chunks[last]) {
		x.chunks = append(x.chunks, make([]byte, 0, max(keyChunk, len(key))))
		last++
	}
	c := x.chunks[last]
	x.m[h] = keyRef{chunk: uint32(last), off: uint32(len(c)), n: uint32(len(key)), id: id}
	x.chunks[last] = append(c, key...)
}
