package capture

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// benchAllocs returns a plausible Alloc/Free stream: a few threads, a few
// hundred stacks, sizes skewed small, addresses in a few heaps, times
// increasing by irregular gaps.
func benchAllocs(n int) ([]Alloc, []Free) {
	rng := rand.New(rand.NewPCG(1, 2))
	allocs := make([]Alloc, n)
	frees := make([]Free, n)
	t := int64(1_000_000_000)
	for i := range allocs {
		t += int64(rng.ExpFloat64() * 50_000)
		size := uint64(16 + rng.IntN(64)*16)
		if rng.IntN(100) == 0 {
			size = uint64(1 << (12 + rng.IntN(10)))
		}
		tid := uint32(1000 + rng.IntN(8))
		addr := 0x5555_5555_0000 + uint64(rng.IntN(1<<24))*16
		allocs[i] = Alloc{Stream: 1, TID: tid, TimeNano: t, Addr: addr, Size: size,
			StackID: uint64(1 + rng.IntN(300)), Func: FuncMalloc}
		frees[i] = Free{Stream: 1, TID: tid, TimeNano: t + 1000, Addr: addr}
	}
	return allocs, frees
}

func BenchmarkWriterAlloc(b *testing.B) {
	allocs, _ := benchAllocs(1 << 16)
	var cw countWriter
	w, _ := NewWriter(&cw)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := w.Alloc(&allocs[i&(len(allocs)-1)]); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cw.n-HeaderSize)/float64(b.N), "bytes/record")
}

func BenchmarkWriterFree(b *testing.B) {
	_, frees := benchAllocs(1 << 16)
	var cw countWriter
	w, _ := NewWriter(&cw)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := w.Free(&frees[i&(len(frees)-1)]); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cw.n-HeaderSize)/float64(b.N), "bytes/record")
}

func BenchmarkReader(b *testing.B) {
	allocs, frees := benchAllocs(1 << 18)
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	for i := range allocs {
		w.Alloc(&allocs[i])
		w.Free(&frees[i])
	}
	w.Close()
	data := buf.Bytes()
	records := 2 * len(allocs)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rd, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := rd.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*records)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkLoad(b *testing.B) {
	allocs, frees := benchAllocs(1 << 18)
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	for i := range allocs {
		w.Alloc(&allocs[i])
		w.Free(&frees[i])
	}
	w.Close()
	data := buf.Bytes()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := ReadAll(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*2*len(allocs))/b.Elapsed().Seconds(), "records/s")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
