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
