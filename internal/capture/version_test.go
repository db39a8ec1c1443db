package capture

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestEventDeltas writes events whose times and addresses jump anywhere
// (the extremes of their types included) over many chunks, ended by Flush
// and by filling up, and reads back exactly what was written: the deltas
// start afresh in every chunk.
func TestEventDeltas(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	times := []int64{0, -1, 1, math.MaxInt64, math.MinInt64, math.MaxInt64, math.MinInt64 + 1}
	addrs := []uint64{0, math.MaxUint64, 1, 1 << 63, (1 << 63) - 1, 0, math.MaxUint64}
	var want []any
	for i := range 300_000 {
		var tm int64
		var addr uint64
		switch {
		case i < len(times):
			tm, addr = times[i], addrs[i]
		case rng.IntN(50) == 0: // a jump: another process, another arena
			tm, addr = int64(rng.Uint64()), rng.Uint64()
		default: // the common case: close to the last event
			tm, addr = int64(i)*700+rng.Int64N(5000), 0x7f00_0000_0000+uint64(rng.IntN(1<<20))*16
		}
		if i%3 == 2 {
			want = append(want, &Free{Stream: uint32(i % 5), TID: uint32(i % 7), TimeNano: tm, Addr: addr})
		} else {
			want = append(want, &Alloc{Stream: uint32(i % 5), TID: uint32(i % 7), TimeNano: tm, Addr: addr,
				Size: uint64(i), StackID: uint64(i % 11), Func: FuncMalloc})
		}
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range want {
		write(t, w, r)
		if i%10_007 == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(chunkStarts(buf.Bytes())) - 1; n < 30 {
		t.Fatalf("%d chunks, want at least 30", n)
	}
	rd, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range want {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got := recordValue(rec); !reflect.DeepEqual(got, r) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got, r)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Errorf("after the last record: %v, want io.EOF", err)
	}
}

// TestReadsVersion1 reads a file as heaplens wrote it before version 2:
// event times and addresses whole, which must not be taken for deltas.
func TestReadsVersion1(t *testing.T) {
	allocs := []Alloc{
		{Stream: 1, TID: 2, TimeNano: 1_000_000, Addr: 0x5555_0000_1000, Size: 64, StackID: 3, Func: FuncMalloc},
		{Stream: 1, TID: 2, TimeNano: 2_000_000, Addr: 0x5555_0000_2000, Size: 32, StackID: 3, Func: FuncCalloc, Origin: 9, Method: MethodOpenMP},
	}
	free := Free{Stream: 1, TID: 2, TimeNano: 3_000_000, Addr: 0x5555_0000_1000}
	var payload []byte
	for _, a := range allocs { // version 1's Alloc body
		b := binary.AppendUvarint(nil, uint64(a.Stream))
		b = binary.AppendUvarint(b, uint64(a.TID))
		b = binary.AppendVarint(b, a.TimeNano)
		b = binary.AppendUvarint(b, a.Addr)
		b = binary.AppendUvarint(b, a.Size)
		b = binary.AppendUvarint(b, a.StackID)
		b = binary.AppendUvarint(b, uint64(a.Func))
		if a.Origin != 0 || a.Method != 0 {
			b = binary.AppendUvarint(b, a.Origin)
			b = binary.AppendUvarint(b, uint64(a.Method))
		}
		payload = append(payload, rawRecord(RecAlloc, b)...)
	}
	b := binary.AppendUvarint(nil, uint64(free.Stream))
	b = binary.AppendUvarint(b, uint64(free.TID))
	b = binary.AppendVarint(b, free.TimeNano)
	b = binary.AppendUvarint(b, free.Addr)
	payload = append(payload, rawRecord(RecFree, b)...)

	file := append([]byte(Magic), 1, 0, 0, 0, 0, 0, 0, 0) // version 1, no flags
	file = append(file, rawChunk(payload)...)
	rd, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if rd.Version() != 1 {
		t.Errorf("Version() = %d, want 1", rd.Version())
	}
	c, err := ReadAll(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Allocs, allocs) || len(c.Frees) != 1 || c.Frees[0] != free {
		t.Errorf("read\n%+v\n%+v\nwant\n%+v\n%+v", c.Allocs, c.Frees, allocs, free)
	}
}
