package collect

import (
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
