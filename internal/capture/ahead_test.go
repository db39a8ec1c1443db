package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
	"testing"
)

// readRecords reads every record of file, with or without ReadAhead, and
// the error that ended the reading.
func readRecords(file []byte, ahead bool) ([]any, string) {
	rd, err := NewReader(bytes.NewReader(file))
	if err != nil {
		return nil, err.Error()
	}
	if ahead {
		rd.ReadAhead()
		defer rd.Close()
	}
	var recs []any
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return recs, ""
		}
		if err != nil {
			return recs, err.Error()
		}
		recs = append(recs, recordValue(rec))
	}
}

// fileOf frames payloads as the chunks of a capture of the given version.
func fileOf(version uint32, payloads ...[]byte) []byte {
	file := binary.LittleEndian.AppendUint32(append([]byte(nil), Magic...), version)
	file = binary.LittleEndian.AppendUint32(file, 0)
	for _, p := range payloads {
		file = append(file, rawChunk(p)...)
	}
	return file
}

// FuzzReadAhead holds the events ReadAhead decodes (decodeEvents) to what
// Next decodes itself, records and damage alike, in every version.
func FuzzReadAhead(f *testing.F) {
	var base eventBase
	a := &Alloc{Stream: 3, TID: 4243, TimeNano: 99_000_001_000, Addr: 0x5555_0000_0010, Size: 1 << 33, StackID: 1 << 40, Func: FuncPvalloc}
	fr := &Free{Stream: 3, TID: 4243, TimeNano: 99_000_002_000, Addr: 0x5555_0000_0010}
	payload := rawRecord(RecAlloc, encode(&Record{Type: RecAlloc, Alloc: *a}, &base))
	payload = append(payload, rawRecord(RecFree, encode(&Record{Type: RecFree, Free: *fr}, &base))...)
	a.Origin, a.Method = 7, MethodOpenMP
	payload = append(payload, rawRecord(RecAlloc, encode(&Record{Type: RecAlloc, Alloc: *a}, &base))...)
	payload = append(payload, rawRecord(RecStack, encode(&Record{Type: RecStack, Stack: &Stack{ID: 2, Locations: []uint64{1}}}, nil))...)
	long := binary.AppendUvarint(encode(&Record{Type: RecFree, Free: *fr}, &base), math.MaxUint64) // an appended field
	payload = append(payload, rawRecord(RecFree, long)...)
	for _, v := range []uint32{1, 2} {
		f.Add(v, payload)
		f.Add(v, payload[:len(payload)-3])
		f.Add(v, rawRecord(RecAlloc, []byte{1, 1, 1, 1, 1, 1, 0x80, 0x02}))
		f.Add(v, rawRecord(RecAlloc, []byte{1, 1, 1, 1, 1, 1, 1, 1}))
		f.Add(v, rawRecord(RecFree, []byte{0xff, 0xff, 0xff, 0xff, 0x10, 1, 1, 1}))
		f.Add(v, rawRecord(RecFree, []byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 1}))
	}
	f.Fuzz(func(t *testing.T, version uint32, payload []byte) {
		version = 1 + version%Version
		file := fileOf(version, payload, payload)
		want, wantErr := readRecords(file, false)
		got, gotErr := readRecords(file, true)
		if gotErr != wantErr || !reflect.DeepEqual(got, want) {
			t.Fatalf("version %d, read ahead:\n%s\n%s\nby Next:\n%s\n%s", version, show(got), gotErr, show(want), wantErr)
		}
	})
}

func show(recs []any) string {
	var b bytes.Buffer
	for _, r := range recs {
		fmt.Fprintf(&b, "%+v\n", r)
	}
	return b.String()
}

// TestReadAheadLongChunk reads a chunk of more events than ReadAhead
// decodes ahead: Next decodes the rest, from the last one's base.
func TestReadAheadLongChunk(t *testing.T) {
	var base eventBase
	var payload []byte
	var want []any
	for i := range maxDecodedEvents + 1000 {
		fr := &Free{Stream: 1, TID: 2, TimeNano: int64(i) * 3, Addr: 0x1000 + uint64(i%7)*16}
		payload = append(payload, rawRecord(RecFree, encode(&Record{Type: RecFree, Free: *fr}, &base))...)
		want = append(want, fr)
	}
	file := fileOf(Version, payload)
	got, err := readRecords(file, true)
	if err != "" || !reflect.DeepEqual(got, want) {
		t.Fatalf("read %d records (error %q), want %d, equal: %v", len(got), err, len(want), reflect.DeepEqual(got, want))
	}
}
