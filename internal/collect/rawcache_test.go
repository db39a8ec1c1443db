package collect

import (
	"encoding/binary"
	"testing"
)

func TestRawCache(t *testing.T) {
	c := newRawCache[int](10)
	get := func(key string) (int, bool) {
		v, _, ok := c.get([]byte(key))
		return v, ok
	}
	put := func(key string, v int) {
		_, h, _ := c.get([]byte(key))
		c.put(h, []byte(key), v)
	}
	put("abcd", 1)
	put("efgh", 2)
	if v, ok := get("abcd"); !ok || v != 1 {
		t.Errorf("abcd: %d, %v; want 1, true", v, ok)
	}
	if _, ok := get("abc"); ok {
		t.Error("abc found: only abcd was kept")
	}

	// Another string under abcd's hash: a miss, never abcd's value.
	_, h, _ := c.get([]byte("abcd"))
	c.m[h] = rawEntry[int]{"wxyz", 9}
	if v, ok := get("abcd"); ok {
		t.Errorf("abcd found (%d) under a hash that now holds another string", v)
	}

	// Replacing a key's value does not count its bytes twice; going past the bound starts over.
	put("efgh", 3)
	if v, ok := get("efgh"); !ok || v != 3 || c.bytes != 8 {
		t.Errorf("efgh: %d, %v, %d bytes kept; want 3, true, 8", v, ok, c.bytes)
	}
	put("ijk", 4)
	if _, ok := get("efgh"); ok || c.bytes != 3 {
		t.Errorf("efgh still kept (%d bytes) after the 10-byte bound was passed", c.bytes)
	}
	if v, ok := get("ijk"); !ok || v != 4 {
		t.Errorf("ijk: %d, %v; want 4, true", v, ok)
	}
}

// stackIndex is exact: two keys under one hash each keep their own ID.
func TestStackIndexCollision(t *testing.T) {
	x := newStackIndex()
	_, hb, ok := x.get([]byte("b"))
	if ok {
		t.Fatal("empty index found a key")
	}
	x.put(hb, []byte("a"), 1) // "a" under b's hash: a collision, made on purpose
	x.put(hb, []byte("b"), 2)
	if id, _, ok := x.get([]byte("b")); !ok || id != 2 {
		t.Errorf("get(b) = %d, %t; want 2", id, ok)
	}
	if _, _, ok := x.get([]byte("c")); ok {
		t.Error("found a key never put")
	}
	_, ha, _ := x.get([]byte("a"))
	x.put(ha, []byte("a"), 3)
	if id, _, ok := x.get([]byte("a")); !ok || id != 3 {
		t.Errorf("get(a) = %d, %t; want 3", id, ok)
	}
}

// stackIndex keeps its keys in chunks: keys across chunks, and one longer
// than a chunk, are all found with their IDs, and nothing else is.
func TestStackIndexChunks(t *testing.T) {
	x := newStackIndex()
	key := func(i int) []byte {
		n := 1000 + i%300
		if i == 500 {
			n = 3 * keyChunk
		}
		b := make([]byte, n)
		binary.LittleEndian.PutUint64(b, uint64(i))
		return b
	}
	const keys = 3000 // about 3.5 chunks
	for i := range keys {
		_, h, ok := x.get(key(i))
		if ok {
			t.Fatalf("key %d found before it was put", i)
		}
		x.put(h, key(i), uint64(i+1))
	}
	if len(x.chunks) < 3 {
		t.Fatalf("%d chunks: the test's keys should span more", len(x.chunks))
	}
	for i := range keys + 10 {
		id, _, ok := x.get(key(i))
		if ok != (i < keys) || (ok && id != uint64(i+1)) {
			t.Errorf("key %d: %d, %v", i, id, ok)
		}
	}
}
