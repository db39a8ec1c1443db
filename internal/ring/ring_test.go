package ring

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// writer plays the library's part: it lays out a ring file as
// docs/ring-format.md says and appends records.
type writer struct {
	mem  []byte
	size uint64
	head uint64
}

func newWriter(size uint64) *writer {
	w := &writer{mem: make([]byte, HeaderSize+size), size: size}
	le := binary.LittleEndian
	le.PutUint32(w.mem[offVersion:], Version)
	le.PutUint64(w.mem[offDataSize:], size)
	le.PutUint64(w.mem[offPID:], 4242)
	le.PutUint64(w.mem[offPPID:], 1)
	le.PutUint64(w.mem[offRate:], 524288)
	cmd := "prog\x00--flag\x00"
	copy(w.mem[offCmdline:], cmd)
	le.PutUint32(w.mem[offCmdlineLen:], uint32(len(cmd)))
	copy(w.mem[offExe:], "/usr/bin/prog")
	le.PutUint32(w.mem[offExeLen:], uint32(len("/usr/bin/prog")))
	le.PutUint32(w.mem[offFlags:], FlagInitDone)
	le.PutUint64(w.mem[offMagic:], Magic)
	return w
}

func (w *writer) put(pos, v uint64) {
	binary.LittleEndian.PutUint64(w.mem[HeaderSize+pos%w.size:], v)
}

// record appends one record; commit=false leaves its header word 0.
func (w *writer) record(typ, fn, count uint64, words []uint64, commit bool) {
	length := 8 * uint64(1+len(words))
	for i, v := range words {
		w.put(w.head+8+8*uint64(i), v)
	}
	if commit {
		w.put(w.head, length|typ<<32|fn<<40|count<<48)
	}
	w.head += length
	binary.LittleEndian.PutUint64(w.mem[offHead:], w.head)
}

func (w *writer) file(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ring.4242.0")
	if err := os.WriteFile(p, w.mem, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func drainAll(t *testing.T, r *Ring) []Record {
	t.Helper()
	var out []Record
	if _, err := r.Drain(func(rec *Record) {
		c := *rec
		c.Frames = append([]uint64(nil), rec.Frames...)
		c.Py = append([]PyFrame(nil), rec.Py...)
		c.Segments = append([]Segment(nil), rec.Segments...)
		out = append(out, c)
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHeader(t *testing.T) {
	r, err := Open(newWriter(1 << 12).file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := r.Header()
	if h.PID != 4242 || h.PPID != 1 || h.Rate != 524288 || h.Exe != "/usr/bin/prog" ||
		strings.Join(h.Cmdline, " ") != "prog --flag" || !r.InitDone() {
		t.Errorf("header = %+v, init done %v", h, r.InitDone())
	}
}

func TestBacking(t *testing.T) {
	cases := []struct {
		name        string
		flags       uint32
		backed      uint64
		errno       uint32
		wantStopped bool
		wantBacked  uint64
	}{
		{"growing", FlagInitDone, 1 << 16, 0, false, 0},
		{"stopped", FlagInitDone | FlagBackingStopped, 1 << 16, 28, true, 1 << 16},
		{"hostile size", FlagBackingStopped, 1 << 40, 28, true, 1 << 18}, // never more than the data area
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWriter(1 << 18)
			le := binary.LittleEndian
			le.PutUint32(w.mem[offFlags:], c.flags)
			le.PutUint64(w.mem[offBacked:], c.backed)
			le.PutUint32(w.mem[offBackingErrno:], c.errno)
			r, err := Open(w.file(t))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			stopped, backed, errno := r.Backing()
			if stopped != c.wantStopped || backed != c.wantBacked || (stopped && errno != unix.ENOSPC) {
				t.Errorf("Backing() = %v, %d, %v; want %v, %d, ENOSPC if stopped", stopped, backed, errno, c.wantStopped, c.wantBacked)
			}
		})
	}
}

func TestDrainRecordsAcrossTheWrap(t *testing.T) {
	w := newWriter(256) // small: records wrap around the end
	// Fill and consume most of the ring first, so the next records straddle the end.
	w.record(RecFree, 0, 0, []uint64{1, 0x10, 7}, true)
	w.record(RecFree, 0, 0, []uint64{2, 0x20, 7}, true)
	w.record(RecFree, 0, 0, []uint64{3, 0x30, 7}, true)
	w.record(RecFree, 0, 0, []uint64{4, 0x40, 7}, true)
	w.record(RecFree, 0, 0, []uint64{5, 0x50, 7}, true)
	w.record(RecFree, 0, 0, []uint64{6, 0x60, 7}, true) // head = 192
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := drainAll(t, r); len(got) != 6 || got[5].Addr != 0x60 {
		t.Fatalf("first drain: %+v", got)
	}
	// Continue writing into the mapped file: the ALLOC record wraps.
	w.mem = r.mem
	w.record(RecAlloc, 1, 3, []uint64{100, 0xabc0, 4096, 77 | 1<<32, 0x401000, 0x402000, 0x403000}, true)
	path := "/lib/libfoo.so.6"
	pathWords := make([]uint64, (len(path)+7)/8)
	pb := make([]byte, 8*len(pathWords))
	copy(pb, path)
	for i := range pathWords {
		pathWords[i] = binary.LittleEndian.Uint64(pb[8*i:])
	}
	mod := append([]uint64{200, 0x7f0000000000, uint64(len(path)), 0, 0x1000, 0, 4, 0x1000, 0x2000, 0x1000, 5}, pathWords...)
	w.record(RecModule, 0, 2, mod, true)
	got := drainAll(t, r)
	if len(got) != 2 {
		t.Fatalf("second drain: %d records", len(got))
	}
	a := got[0]
	if a.Type != RecAlloc || a.Func != 1 || a.TimeNano != 100 || a.Addr != 0xabc0 || a.Size != 4096 || a.TID != 77 ||
		!a.Truncated || len(a.Frames) != 3 || a.Frames[2] != 0x403000 {
		t.Errorf("alloc = %+v", a)
	}
	m := got[1]
	if m.Type != RecModule || m.Bias != 0x7f0000000000 || m.Path != path || len(m.Segments) != 2 ||
		m.Segments[1] != (Segment{Vaddr: 0x1000, Memsz: 0x2000, Offset: 0x1000, Flags: 5}) {
		t.Errorf("module = %+v", m)
	}
	c := r.Counters()
	if c.Tail != c.Head {
		t.Errorf("tail %d != head %d after draining everything", c.Tail, c.Head)
	}
	// Consumed space is zeroed, so a producer's uncommitted header reads 0.
	for i := uint64(0); i < w.size; i += 8 {
		if v := binary.LittleEndian.Uint64(r.data[i:]); v != 0 {
			t.Fatalf("data word %d = %#x after draining, want 0", i/8, v)
		}
	}
}

// A SKIP record ends a soft lap: the reader jumps to the ring's start
// without reading what it spans (the library zeroed nothing there: the
// reader did, a lap before). One that does not end at the ring's end is a
// damaged ring, not a jump into the middle of a record.
func TestDrainSkipsToTheRingStart(t *testing.T) {
	w := newWriter(256)
	w.record(RecFree, 0, 0, []uint64{1, 0x10, 7}, true)
	w.record(RecFree, 0, 0, []uint64{2, 0x20, 7}, true) // head = 64
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := drainAll(t, r); len(got) != 2 {
		t.Fatalf("first drain: %d records, want 2", len(got))
	}
	// The reader is past this lap's start: the writer skips to the ring's end.
	w.mem = r.mem
	w.put(w.head, (256-64)|RecSkip<<32) // the header alone
	w.head += 256 - 64
	w.record(RecFree, 0, 0, []uint64{3, 0x30, 7}, true) // at the ring's start again
	got := drainAll(t, r)
	if len(got) != 1 || got[0].Addr != 0x30 || got[0].Type != RecFree {
		t.Fatalf("second drain: %+v, want the third FREE and not the skip", got)
	}
	if c := r.Counters(); c.Tail != 256+32 || c.Tail != c.Head {
		t.Errorf("tail %d, head %d: want both past the skip and the last record (288)", c.Tail, c.Head)
	}
	for i := uint64(0); i < w.size; i += 8 {
		if v := binary.LittleEndian.Uint64(r.data[i:]); v != 0 {
			t.Fatalf("data word %d = %#x after draining, want 0", i/8, v)
		}
	}

	bad := newWriter(256)
	bad.record(RecFree, 0, 0, []uint64{1, 0x10, 7}, true)
	bad.put(bad.head, 64|RecSkip<<32) // ends at 96, not at 256
	bad.head += 64
	bad.record(RecFree, 0, 0, []uint64{2, 0x20, 7}, true)
	binary.LittleEndian.PutUint64(bad.mem[offHead:], bad.head)
	rb, err := Open(bad.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	n, err := rb.Drain(func(*Record) {})
	if err == nil || !strings.Contains(err.Error(), "does not end at the ring's end") || n != 1 {
		t.Errorf("a skip ending mid-ring: %d records, err %v; want 1 and an error", n, err)
	}
}

func TestDrainStopsAtUncommitted(t *testing.T) {
	w := newWriter(1 << 12)
	w.record(RecFree, 0, 0, []uint64{1, 0x10, 7}, true)
	w.record(RecFree, 0, 0, []uint64{2, 0x20, 7}, false) // reserved, still being written
	w.record(RecFree, 0, 0, []uint64{3, 0x30, 7}, true)
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := drainAll(t, r); len(got) != 1 {
		t.Fatalf("drained %d records, want 1 (stop at the uncommitted one)", len(got))
	}
	c := r.Counters()
	if c.Head-c.Tail != 64 {
		t.Errorf("head-tail = %d, want the 64 bytes behind the uncommitted record", c.Head-c.Tail)
	}
}

func TestOpenRejects(t *testing.T) {
	dir := t.TempDir()
	notReady := newWriter(1 << 12)
	binary.LittleEndian.PutUint64(notReady.mem[offMagic:], 0)
	badSize := newWriter(1 << 12)
	binary.LittleEndian.PutUint64(badSize.mem[offDataSize:], 3000)
	badVersion := newWriter(1 << 12)
	binary.LittleEndian.PutUint32(badVersion.mem[offVersion:], 99)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"short", make([]byte, 100), ErrNotReady.Error()},
		{"no magic yet", notReady.mem, ErrNotReady.Error()},
		{"data size not a power of two", badSize.mem, "bad data size"},
		{"newer version", badVersion.mem, "version 99"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		os.WriteFile(p, c.data, 0o600)
		r, err := Open(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open = %v, %v; want error containing %q", c.name, r, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("Open of a missing file succeeded")
	}
}

// Records whose length is sound but whose contents lie are skipped and
// counted; the good record behind them is still delivered.
func TestDrainSkipsMalformedRecords(t *testing.T) {
	cases := []struct {
		name       string
		typ, count uint64
		words      []uint64
	}{
		{"alloc claims 9 frames, has none", RecAlloc, 9, []uint64{1, 2, 3, 4}},
		{"alloc too short", RecAlloc, 0, []uint64{1, 2}},
		{"code line table near 2^64", RecCode, 0, []uint64{1, 2, 1 | 8<<8, 1 | 8<<8, ^uint64(0) - 6, 0, 0}},
		{"code file length near 2^56", RecCode, 0, []uint64{1, 2, 1 | (^uint64(0)>>8)<<8, 1, 0, 0}},
		{"code table length 2^64-1", RecCode, 0, []uint64{1, 2, 1 | 8<<8, 1 | 8<<8, ^uint64(0), 0, 0}},
		{"module path longer than its words", RecModule, 0, []uint64{1, 2, 100, 0}},
		{"module with fewer words than segments", RecModule, 3, []uint64{1, 2, 0}},
		{"free with 2 words", RecFree, 0, []uint64{1, 2}},
		{"mark with 4 words", RecMark, 0, []uint64{1, 2, 3, 4}},
		{"stack with ref 2^29", RecStack, 1, []uint64{MaxStackRef, 0, 0x401000}},
		{"stack with one word", RecStack, 0, []uint64{1}},
		{"stack claims 2 frames, has 1", RecStack, 2, []uint64{5, 0, 0x401000}},
		{"alloc naming ref 2^29", RecAlloc, 0, []uint64{1, 2, 3, 4 | AllocStackRef<<32, MaxStackRef}},
		{"alloc naming a ref, with frames", RecAlloc, 1, []uint64{1, 2, 3, 4 | AllocStackRef<<32, 5, 0x401000}},
		{"alloc naming a ref it lacks", RecAlloc, 0, []uint64{1, 2, 3, 4 | AllocStackRef<<32}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWriter(1 << 12)
			w.record(c.typ, 1, c.count, c.words, true)
			w.record(RecFree, 0, 0, []uint64{7, 0xabc, 9}, true)
			r, err := Open(w.file(t))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			recs := drainAll(t, r)
			if len(recs) != 1 || recs[0].Type != RecFree || recs[0].Addr != 0xabc {
				t.Errorf("delivered %+v, want only the FREE behind the bad record", recs)
			}
			if r.Malformed != 1 {
				t.Errorf("Malformed = %d, want 1", r.Malformed)
			}
			if cnt := r.Counters(); cnt.Tail != cnt.Head {
				t.Errorf("tail %d != head %d: the bad record was not consumed", cnt.Tail, cnt.Head)
			}
		})
	}
}

// A header whose length cannot frame a record ends the drain with an error.
func TestDrainRejectsBadHeader(t *testing.T) {
	w := newWriter(1 << 12)
	w.put(0, 12|RecFree<<32) // a length that is not a whole number of words
	binary.LittleEndian.PutUint64(w.mem[offHead:], 16)
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Drain(func(*Record) {}); err == nil {
		t.Errorf("a record of 12 bytes was accepted")
	}
}

// FuzzDecode feeds arbitrary records to the decoder: it must never panic,
// and what it accepts must lie within the record.
func FuzzDecode(f *testing.F) {
	f.Add(uint64(RecCode), uint64(0), uint64(0), []byte("0123456789abcdef0123456789abcdef01234567"))
	f.Add(uint64(RecAlloc), uint64(1), uint64(0), make([]byte, 48))
	f.Add(uint64(RecModule), uint64(1), uint64(0), make([]byte, 64))
	f.Add(uint64(RecFree), uint64(0), uint64(FuncMunmap), make([]byte, 32))
	f.Add(uint64(RecMallinfo), uint64(0), uint64(0), make([]byte, 48))
	f.Add(uint64(RecStack), uint64(1), uint64(0), make([]byte, 40))
	// STACK deltas (StackDelta): well-formed, counts past the limits, no tid.
	stackSeed := func(count uint64, w ...uint64) {
		b := make([]byte, 8*len(w))
		for i, x := range w {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
		f.Add(uint64(RecStack), count, uint64(0), b)
	}
	stackSeed(1, 5, 9|StackDelta<<32|1<<48, 3|2<<16|4<<32, 0x401000, 0xc0de, 5)
	stackSeed(0, 5, 9|StackDelta<<32, MaxFrames|0<<16)
	stackSeed(1, 5, 9|StackDelta<<32, MaxFrames|0<<16, 0x401000)
	stackSeed(0, 5, 9|StackDelta<<32|1<<48, MaxPyFrames<<16, 0xc0de, 5)
	stackSeed(0, 5, StackDelta<<32, 1)
	stackSeed(0, 5, 9|StackDelta<<32, 1|uint64(MaxStackRef)<<32)
	f.Fuzz(func(t *testing.T, typ, count, fn uint64, b []byte) {
		words := make([]uint64, len(b)/8)
		for i := range words {
			words[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		var r Ring
		var rec Record
		hdr := 8*uint64(len(words)+1) | (typ&0xff)<<32 | (fn&0xff)<<40 | (count&0xffff)<<48
		if err := r.decode(&rec, hdr, words); err != nil {
			return
		}
		if len(rec.Frames)+2*len(rec.Py) > len(words) {
			t.Errorf("%d frames and %d Python frames from %d words", len(rec.Frames), len(rec.Py), len(words))
		}
		if c := rec.Code; c != nil && len(c.File)+len(c.Name)+len(c.Table) > 8*len(words) {
			t.Errorf("code of %d+%d+%d bytes from %d words", len(c.File), len(c.Name), len(c.Table), len(words))
		}
		if len(rec.Path) > 8*len(words) {
			t.Errorf("path of %d bytes from %d words", len(rec.Path), len(words))
		}
	})
}

// A STACK record, and ALLOCs that name it by its ref (with and without an
// origin token) or carry their own stack.
func TestDrainStackRefs(t *testing.T) {
	w := newWriter(1 << 16)
	w.record(RecStack, 0, 2, []uint64{77, AllocTruncated<<32 | 1<<48, 0x401000, 0x402000, 0xc0de, 5 | 1<<32}, true)
	w.record(RecAlloc, 1, 0, []uint64{10, 0xa0, 64, 600 | AllocStackRef<<32, 77}, true)
	w.record(RecAlloc, 1, 0, []uint64{11, 0xb0, 32, 601 | (AllocStackRef|AllocOrigin)<<32, 9<<32 | 1, 77}, true)
	w.record(RecAlloc, 1, 1, []uint64{12, 0xc0, 16, 602, 0x403000}, true)
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drainAll(t, r)
	if len(got) != 4 || r.Malformed != 0 {
		t.Fatalf("got %d records, %d malformed", len(got), r.Malformed)
	}
	st, a, o, plain := got[0], got[1], got[2], got[3]
	if st.Type != RecStack || st.Ref != 77 || !st.Truncated || len(st.Frames) != 2 || st.Frames[1] != 0x402000 ||
		len(st.Py) != 1 || st.Py[0].Code != 0xc0de || st.Py[0].Identity != 1 || st.Py[0].Pos != 4 {
		t.Errorf("STACK decoded as %+v", st)
	}
	if !a.HasRef || a.Ref != 77 || a.Addr != 0xa0 || a.TID != 600 || len(a.Frames) != 0 || len(a.Py) != 0 {
		t.Errorf("ALLOC naming ref 77 decoded as %+v", a)
	}
	if !o.HasRef || o.Ref != 77 || o.Token != 9<<32|1 || o.Addr != 0xb0 {
		t.Errorf("ALLOC with an origin naming ref 77 decoded as %+v", o)
	}
	if plain.HasRef || len(plain.Frames) != 1 || plain.Frames[0] != 0x403000 {
		t.Errorf("ALLOC with its own stack decoded as %+v", plain)
	}
}

// STACK records sent as deltas (docs/ring-format.md, "Stacks by
// reference"): the counts, bounded by the record and the limits.
func TestDecodeStackDelta(t *testing.T) {
	tests := []struct {
		name    string
		count   uint64
		w       []uint64
		wantErr bool
		k, j    int
		base    uint32
	}{
		{"whole, with its thread", 1, []uint64{5, 9 | 1<<48, 0x401000, 0xc0de, 5}, false, 0, 0, 0},
		{"delta", 1, []uint64{5, 9 | StackDelta<<32 | 1<<48, 3 | 2<<16 | 4<<32, 0x401000, 0xc0de, 5}, false, 3, 2, 4},
		{"delta of nothing new", 0, []uint64{5, 9 | StackDelta<<32, MaxFrames | MaxPyFrames<<16 | (MaxStackRef-1)<<32}, false, MaxFrames, MaxPyFrames, MaxStackRef - 1},
		{"no delta word", 0, []uint64{5, 9 | StackDelta<<32}, true, 0, 0, 0},
		{"no thread", 0, []uint64{5, StackDelta << 32, 1}, true, 0, 0, 0},
		{"native frames past MaxFrames", 1, []uint64{5, 9 | StackDelta<<32, MaxFrames, 0x401000}, true, 0, 0, 0},
		{"Python frames past the limit", 0, []uint64{5, 9 | StackDelta<<32 | 1<<48, MaxPyFrames << 16, 0xc0de, 5}, true, 0, 0, 0},
		{"base ref out of range", 0, []uint64{5, 9 | StackDelta<<32, 1 | uint64(MaxStackRef)<<32}, true, 0, 0, 0},
		{"frames past the record", 2, []uint64{5, 9 | StackDelta<<32, 1, 0x401000}, true, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Ring
			var rec Record
			hdr := 8*uint64(len(tt.w)+1) | RecStack<<32 | tt.count<<48
			err := r.decode(&rec, hdr, tt.w)
			if (err != nil) != tt.wantErr {
				t.Fatalf("decode: %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if rec.TID != 9 || rec.Ref != 5 || rec.Delta != (tt.w[1]>>32&StackDelta != 0) ||
				rec.BaseNative != tt.k || rec.BasePy != tt.j || rec.BaseRef != tt.base || len(rec.Frames) != int(tt.count) {
				t.Errorf("decoded %+v", rec)
			}
		})
	}
}

// Pool work: an ALLOC carrying an origin token and method, and the ORIGIN
// record with the origin thread's stack (docs/ring-format.md, "Thread pools").
func TestDrainOriginRecords(t *testing.T) {
	w := newWriter(1 << 16)
	const token = 501<<32 | 7
	flags := uint64(AllocOrigin | OriginOpenMP<<AllocMethodShift)
	w.record(RecAlloc, 1, 2, []uint64{10, 0xa0, 64, 600 | flags<<32, token, 0x401000, 0x402000}, true)
	w.record(RecOrigin, 0, 1, []uint64{11, token, 501 | 1<<48, 0x403000, 0xc0de, 5 | 1<<32}, true)
	w.record(RecAlloc, 1, 1, []uint64{12, 0xb0, 32, 601 | uint64(OriginUnattributed<<AllocMethodShift)<<32, 0x404000}, true)
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := drainAll(t, r)
	if len(got) != 3 {
		t.Fatalf("got %d records", len(got))
	}
	a, o, u := got[0], got[1], got[2]
	if a.Token != token || a.Method != OriginOpenMP || a.TID != 600 || len(a.Frames) != 2 || a.Frames[0] != 0x401000 {
		t.Errorf("ALLOC with origin: %+v", a)
	}
	if o.Type != RecOrigin || o.Token != token || o.TID != 501 || len(o.Frames) != 1 || o.Frames[0] != 0x403000 ||
		len(o.Py) != 1 || o.Py[0].Code != 0xc0de || o.Py[0].Identity != 1 || o.Py[0].Pos != 4 {
		t.Errorf("ORIGIN: %+v", o)
	}
	if u.Token != 0 || u.Method != OriginUnattributed || len(u.Frames) != 1 || u.Frames[0] != 0x404000 {
		t.Errorf("unattributed ALLOC: %+v", u)
	}
}

// DrainN consumes at most its limit, in order, and the next call goes on
// where it stopped, so that rings can be drained a slice each in turn.
func TestDrainNSlices(t *testing.T) {
	w := newWriter(1 << 12)
	for i := range 10 {
		w.record(RecFree, 0, 0, []uint64{uint64(100 + i), 0x10 * uint64(i+1), 7}, true)
	}
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var times []int64
	for _, want := range []int{4, 4, 2, 0} {
		n, err := r.DrainN(4, func(rec *Record) { times = append(times, rec.TimeNano) })
		if err != nil || n != want {
			t.Fatalf("DrainN(4) = %d, %v; want %d", n, err, want)
		}
	}
	for i, ts := range times {
		if ts != int64(100+i) {
			t.Fatalf("record %d: time %d, want %d (in order, none twice)", i, ts, 100+i)
		}
	}
}

// Exact mode's FREE functions are read as FREEs, a VOID record (a FREE
// withdrawn) is passed over, and a FREE of a function still unknown is
// malformed: never read as a free.
func TestDrainExactFrees(t *testing.T) {
	w := newWriter(1 << 12)
	binary.LittleEndian.PutUint32(w.mem[offFlags:], FlagInitDone|FlagExactFrees)
	w.record(RecFree, FuncFreeAny, 0, []uint64{1, 0x10, 7}, true)
	w.record(RecVoid, 0, 0, []uint64{2, 0x20, 7}, true)
	w.record(RecFree, FuncFreePyMem, 0, []uint64{3, 0x30, 7}, true)
	w.record(RecFree, FuncFreePyMem+1, 0, []uint64{4, 0x40, 7}, true)
	w.record(RecFree, FuncFreeAny, 0, []uint64{5, 0x50, 7, 8}, true)
	r, err := Open(w.file(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.Header().ExactFrees {
		t.Errorf("the header's ExactFrees flag was not read")
	}
	var frees []Record
	for _, rec := range drainAll(t, r) {
		if rec.Type != RecVoid { // delivered as any record of a type the reader does not know, which the collector passes over
			frees = append(frees, rec)
		}
	}
	if len(frees) != 2 || frees[0].Type != RecFree || frees[0].Func != FuncFreeAny || frees[0].Addr != 0x10 ||
		frees[1].Type != RecFree || frees[1].Func != FuncFreePyMem || frees[1].Addr != 0x30 {
		t.Errorf("delivered %+v, want the FREEs at 0x10 and 0x30", frees)
	}
	if r.Malformed != 2 {
		t.Errorf("Malformed = %d, want 2 (a FREE of function %d, one of 4 words)", r.Malformed, FuncFreePyMem+1)
	}
}
