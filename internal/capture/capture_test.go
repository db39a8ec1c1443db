package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/klauspost/compress/zstd"
)

// full returns one record of every type with every field set to a value
// that exercises multi-byte varints and negative numbers.
func full() []any {
	return []any{
		&Meta{FormatVersion: 1, HeaplensVersion: "0.1.0-dev", Rate: 512 << 10, StartUnixNano: 1_700_000_000_123_456_789,
			Command: []string{"python3", "-c", "print('héllo; world')"}, Host: "build-7", AttachedPID: 31337, AttachedHostPID: 7},
		&Process{Stream: 3, PID: 4242, PPID: 1, StartMonoNano: 99_000_000_001, StartUnixNano: -5,
			Cmdline: []string{"/usr/bin/python3", "app.py", ""}, Exe: "/usr/bin/python3.12", Python: "3.12.1", PythonNote: "note"},
		&Mapping{ID: 7, Stream: 3, Start: 0x7f00_0000_0000, Limit: 0x7f00_0010_0000, Offset: 0x1000,
			LoadBias: 0x7eff_ffff_f000, File: "/usr/lib/libc.so.6", BuildID: "deadbeef00", TimeNano: 99_000_000_500},
		&Location{ID: 11, MappingID: 7, Address: 0x7f00_0000_1234, Lines: []Line{
			{Function: "inlined_helper", File: "/src/a.c", Line: 10},
			{Function: "outer", File: "", Line: 0},
			{Function: "neg", File: "x.h", Line: -1},
		}},
		&Location{ID: 12, Address: 0xffff_ffff_ffff_ffff},
		&Location{ID: 13, Kind: KindPython, Lines: []Line{{Function: "Cache.load", File: "", Line: 7}}},
		&Location{ID: 14, Kind: KindPool, Method: MethodUnattributed, Lines: []Line{{Function: "<unattributed: libgomp worker>"}}},
		&Stack{ID: 1 << 40, Locations: []uint64{11, 12, 11, 13, 14}},
		&Stack{ID: 2},
		&Alloc{Stream: 3, TID: 4243, TimeNano: 99_000_001_000, Addr: 0x5555_0000_0010, Size: 1 << 33, StackID: 1 << 40, Func: FuncPvalloc},
		&Alloc{Stream: 0xffff_ffff, TID: 0, TimeNano: -1, Addr: 0, Size: 0, StackID: 0, Func: 255},
		&Free{Stream: 3, TID: 4243, TimeNano: 99_000_002_000, Addr: 0x5555_0000_0010},
		&End{Stream: 3, TimeNano: 99_100_000_000, ExitCode: -1, Signal: 9, Signaled: true, Known: true, Exec: true, Detached: true,
			DroppedAllocs: 12, DroppedFrees: 3, LostBytes: 4096},
		&End{Stream: 4, Known: true, ExitCode: 2},
		&RSS{Stream: 3, TimeNano: 99_000_003_000, Bytes: 1 << 33},
		&Note{Stream: 3, Text: "pid 4242: 2 malformed ring records were skipped"},
		&Note{Text: ""},
		&Resident{Stream: 3, TimeNano: 99_000_006_000, Addr: 0x7f00_0000_0000, Size: 128 << 20, Resident: 4096},
		&Malloc{Stream: 3, TimeNano: 99_000_005_000, Arena: 1 << 35, Mmapped: 7, InUse: 1 << 34, Free: 1<<34 - 1, Keep: 4096},
		&Mark{Stream: 3, TimeNano: 99_000_004_000, Value: 1 << 63},
	}
}

// write writes one record of any type.
func write(t testing.TB, w *Writer, r any) {
	t.Helper()
	if err := w.WriteRecord(recordOf(r)); err != nil {
		t.Fatalf("writing %T: %v", r, err)
	}
}

// recordOf returns a Record holding a copy of r, a pointer to a record.
func recordOf(r any) *Record {
	for t := range recordTypes {
		if rec := (&Record{Type: RecordType(t)}); rec.Type.known() && reflect.TypeOf(rec.body()) == reflect.TypeOf(r) {
			reflect.ValueOf(rec.body()).Elem().Set(reflect.ValueOf(r).Elem())
			return rec
		}
	}
	panic(fmt.Sprintf("no record type holds %T", r))
}

// recordValue returns a copy of the record Next decoded, as the same
// pointer type the test wrote.
func recordValue(rec *Record) any {
	b := reflect.ValueOf(rec.body())
	v := reflect.New(b.Type().Elem())
	v.Elem().Set(b.Elem())
	return v.Interface()
}

// encode returns the body of a record, its event relative to base.
func encode(r *Record, base *eventBase) []byte {
	c := codec{base: base}
	r.body().code(&c)
	return c.b
}

// decode decodes a body into r, whose Type is set.
func decode(b []byte, r *Record) error {
	c := codec{b: b, dec: true, base: &eventBase{}}
	r.body().code(&c)
	return c.err
}

func TestRoundTrip(t *testing.T) {
	for _, r := range full() {
		t.Run(reflect.TypeOf(r).Elem().Name(), func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			write(t, w, r)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			rd, err := NewReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			if got := recordValue(rec); !reflect.DeepEqual(got, r) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
			}
			if _, err := rd.Next(); err != io.EOF {
				t.Errorf("after the only record: err = %v, want io.EOF", err)
			}
		})
	}
}

// testWriter returns a Writer to a buffer, seen by obs if not nil.
func testWriter(t testing.TB, obs Observer) (*Writer, *bytes.Buffer) {
	t.Helper()
	buf := new(bytes.Buffer)
	w, err := NewWriter(buf)
	if err != nil {
		t.Fatal(err)
	}
	if obs != nil {
		w.SetObserver(obs)
	}
	return w, buf
}

// sampleCapture writes a small but realistic capture in several chunks.
func sampleCapture(t testing.TB) []byte { return sampleCaptureTo(t, nil) }

// sampleCaptureTo is sampleCapture, seen by obs as it is written; a
// location's name is longer than readers keep.
func sampleCaptureTo(t testing.TB, obs Observer) []byte {
	t.Helper()
	w, buf := testWriter(t, obs)
	if obs != nil {
		write(t, w, &Location{ID: 99, Lines: []Line{{Function: strings.Repeat("f", MaxName+10)}}})
	}
	for i, r := range full() {
		write(t, w, r)
		if i == 4 {
			w.Flush()
		}
	}
	for i := range 300 {
		write(t, w, &Alloc{Stream: 3, TID: 7, TimeNano: int64(1000 + i), Addr: 0x1000 + uint64(i)*64, Size: 48, StackID: 2, Func: FuncMalloc})
		if i%2 == 0 {
			write(t, w, &Free{Stream: 3, TID: 7, TimeNano: int64(1000 + i), Addr: 0x1000 + uint64(i)*64})
		}
		if i%100 == 99 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLoad(t *testing.T) {
	data := sampleCapture(t)
	path := filepath.Join(t.TempDir(), "x.heaplens")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	recs := full()
	if !reflect.DeepEqual(&c.Meta, recs[0]) {
		t.Errorf("Meta = %+v", c.Meta)
	}
	if len(c.Processes) != 1 || c.Processes[0].PID != 4242 {
		t.Errorf("Processes = %+v", c.Processes)
	}
	if len(c.Mappings) != 1 || len(c.Locations) != 4 || len(c.Stacks) != 2 || len(c.Ends) != 2 {
		t.Errorf("maps: %d mappings, %d locations, %d stacks, %d ends", len(c.Mappings), len(c.Locations), len(c.Stacks), len(c.Ends))
	}
	if len(c.RSS) != 1 || c.RSS[0].Bytes != 1<<33 {
		t.Errorf("RSS = %+v, want the one RSS record", c.RSS)
	}
	if len(c.Allocs) != 302 || len(c.Frees) != 151 || len(c.FreeOrder) != 151 {
		t.Errorf("%d allocs, %d frees, %d free orders", len(c.Allocs), len(c.Frees), len(c.FreeOrder))
	}
	// The Free from full() follows its two Allocs; the first loop Free
	// follows the first loop Alloc.
	if c.FreeOrder[0] != 2 || c.FreeOrder[1] != 3 || c.FreeOrder[2] != 5 {
		t.Errorf("FreeOrder starts %v, want [2 3 5 ...]", c.FreeOrder[:3])
	}
	want := []string{
		"1 allocs name an unknown stream (e.g. alloc 1, stream 4294967295)",
		"1 end records name an unknown stream (e.g. stream 4)",
	}
	if got := c.Check(); !reflect.DeepEqual(got, want) {
		t.Errorf("Check() = %q, want %q", got, want)
	}
	if !reflect.DeepEqual(c.Problems, want) {
		t.Errorf("Problems = %q, want %q", c.Problems, want)
	}
	if l := c.Locations[13]; l.Kind != KindPython {
		t.Errorf("Python location read back as %v", l.Kind)
	}
	if l := c.Locations[14]; l.Kind != KindPool || l.Method != MethodUnattributed {
		t.Errorf("pool location read back as %v, method %d", l.Kind, l.Method)
	}
}

// Reading makes placeholders of dangling references, once, so that every
// report names them alike.
func TestResolve(t *testing.T) {
	c := NewCapture()
	c.Processes = []*Process{{Stream: 1}}
	c.Locations[1] = &Location{ID: 1, Address: 0x10}
	c.Stacks[5] = &Stack{ID: 5, Locations: []uint64{1, 9}}
	c.Allocs = []Alloc{{Stream: 1, StackID: 5}, {Stream: 1, StackID: 7}, {Stream: 1, StackID: 0}}
	c.Origins = []Origin{{Stream: 1, Token: 3, StackID: 7}}
	c.Resolve()
	if l := c.Locations[9]; l == nil || l.Kind != KindMissing || l.Lines[0].Function != "<unknown location 9>" {
		t.Errorf("location 9: %+v", l)
	}
	st := c.Stacks[7]
	if st == nil || len(st.Locations) != 1 {
		t.Fatalf("stack 7: %+v", st)
	}
	if l := c.Locations[st.Locations[0]]; l == nil || l.Kind != KindMissing || l.Lines[0].Function != "<unknown stack 7>" || l.ID <= 9 {
		t.Errorf("stack 7's placeholder: %+v", l)
	}
	if c.Stacks[0] != nil {
		t.Error("stack 0 (no stack) was made up")
	}
	if len(c.Problems) != 3 || len(c.Check()) != 0 {
		t.Errorf("Problems %q; Check after Resolve %q", c.Problems, c.Check())
	}
}

// A Location written before kinds were (no appended field) is Python when it
// has no mapping and a .py or "<...>" file, as reports used to tell.
func TestLegacyKind(t *testing.T) {
	for _, tc := range []struct {
		loc  Location
		want Kind
	}{
		{Location{ID: 1, Lines: []Line{{Function: "f", File: "/a/b.py", Line: 3}}}, KindPython},
		{Location{ID: 1, Lines: []Line{{Function: "<module>", File: "<string>"}}}, KindPython},
		{Location{ID: 1, MappingID: 2, Lines: []Line{{Function: "f", File: "gen.py"}}}, KindNative},
		{Location{ID: 1, Lines: []Line{{Function: "f", File: "a.c"}}}, KindNative},
		{Location{ID: 1, Address: 0x10}, KindNative},
	} {
		got := Record{Type: RecLocation}
		if err := decode(encode(&Record{Type: RecLocation, Location: &tc.loc}, nil), &got); err != nil || got.Location.Kind != tc.want {
			t.Errorf("%+v: kind %v (%v), want %v", tc.loc, got.Location.Kind, err, tc.want)
		}
	}
	bad := append(encode(&Record{Type: RecLocation, Location: &Location{ID: 1}}, nil), byte(numKinds), 0)
	if err := decode(bad, &Record{Type: RecLocation}); err == nil {
		t.Error("an unknown kind was accepted")
	}
}

func TestHeaderErrors(t *testing.T) {
	hdr := func(magic string, version, flags uint32) []byte {
		b := []byte(magic)
		b = binary.LittleEndian.AppendUint32(b, version)
		return binary.LittleEndian.AppendUint32(b, flags)
	}
	tests := []struct {
		name    string
		data    []byte
		want    string
		corrupt bool
	}{
		{"wrong magic", hdr("HEAPLENZ", 1, 0), "not a heaplens capture", false},
		{"text file", []byte("hello world, this is text"), "not a heaplens capture", false},
		{"newer version", hdr(Magic, Version+1, 0), fmt.Sprintf("capture format version %d is newer than this heaplens supports (%d)", Version+1, Version), false},
		{"version 0", hdr(Magic, 0, 0), "not a heaplens capture", false},
		{"flags", hdr(Magic, 1, 4), "header flags 0x4", false},
		{"empty", nil, "file ends after 0 of 16 header bytes", true},
		{"half header", hdr(Magic, 1, 0)[:11], "file ends after 11 of 16 header bytes", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			var ce *CorruptError
			if errors.As(err, &ce) != tt.corrupt {
				t.Errorf("CorruptError = %v, want %v", errors.As(err, &ce), tt.corrupt)
			}
		})
	}
}

// rawChunk frames an uncompressed payload as a chunk.
func rawChunk(payload []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	comp := enc.EncodeAll(payload, nil)
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(comp)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(comp, castagnoli))
	return append(b, comp...)
}

func rawRecord(t RecordType, body []byte) []byte {
	b := []byte{byte(t)}
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

func TestUnknownRecordsAndAppendedFields(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	w.Close()
	free := &Free{Stream: 1, TID: 2, TimeNano: 3, Addr: 4}
	// A Free with two extra fields a newer writer appended.
	body := encode(&Record{Type: RecFree, Free: *free}, &eventBase{})
	body = binary.AppendUvarint(body, 99)
	body = append(body, 6, 'f', 'u', 't', 'u', 'r', 'e') // a string
	var payload []byte
	payload = append(payload, rawRecord(200, []byte("some future record"))...)
	payload = append(payload, rawRecord(0, nil)...)
	payload = append(payload, rawRecord(RecFree, body)...)
	payload = append(payload, rawRecord(201, nil)...)
	buf.Write(rawChunk(payload))
	c, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if c.Skipped != 3 {
		t.Errorf("Skipped = %d, want 3", c.Skipped)
	}
	if len(c.Frees) != 1 || c.Frees[0] != *free {
		t.Errorf("Frees = %+v, want [%+v]", c.Frees, *free)
	}
}

func TestBadRecords(t *testing.T) {
	good := rawRecord(RecFree, encode(&Record{Type: RecFree, Free: Free{Stream: 1, Addr: 5}}, &eventBase{}))
	tests := []struct {
		name string
		rec  []byte
		want string
	}{
		{"short body", rawRecord(RecAlloc, []byte{1, 2}), "body too short"},
		{"length past payload", []byte{byte(RecFree), 50, 1}, "exceeds limit or remaining"},
		{"huge length", append([]byte{byte(RecFree)}, binary.AppendUvarint(nil, 1<<40)...), "exceeds limit"},
		{"bad varint", []byte{byte(RecFree), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "malformed body length"},
		{"zero stack ID", rawRecord(RecStack, []byte{0, 0}), "ID 0 is reserved"},
		{"huge count", rawRecord(RecStack, append([]byte{1}, binary.AppendUvarint(nil, 1<<50)...)), "count exceeds"},
		{"u8 overflow", rawRecord(RecAlloc, []byte{1, 1, 1, 1, 1, 1, 0x80, 0x02}), "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, _ := NewWriter(&buf)
			w.Free(&Free{Stream: 1, Addr: 1})
			w.Close()
			buf.Write(rawChunk(append(append([]byte{}, good...), tt.rec...)))
			c, err := ReadAll(&buf)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Kind != BadRecord {
				t.Fatalf("err = %v, want a BadRecord CorruptError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
			if ce.Chunk != 1 || ce.ChunksRead != 1 || ce.Offset <= HeaderSize {
				t.Errorf("chunk %d, read %d, offset %d; want chunk 1, 1 read, offset past the first chunk", ce.Chunk, ce.ChunksRead, ce.Offset)
			}
			// Both good records survive: the first chunk's and the one
			// before the bad record.
			if len(c.Frees) != 2 {
				t.Errorf("%d frees survived, want 2", len(c.Frees))
			}
		})
	}
}

// chunkStarts returns the file offset of every chunk and the file length.
func chunkStarts(data []byte) []int {
	var starts []int
	for off := HeaderSize; off < len(data); {
		starts = append(starts, off)
		off += chunkHeaderSize + int(binary.LittleEndian.Uint32(data[off:]))
	}
	return append(starts, len(data))
}

// TestTruncateEverywhere cuts a capture at every byte: the reader returns
// exactly the complete chunks before the cut and a Truncated error.
func TestTruncateEverywhere(t *testing.T) {
	data := sampleCapture(t)
	full, err := ReadAll(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	starts := chunkStarts(data)
	if len(starts) < 4 {
		t.Fatalf("sample capture has only %d chunks", len(starts)-1)
	}
	for cut := 0; cut < len(data); cut++ {
		c, err := readBothWays(t, data[:cut])
		var ce *CorruptError
		if !errors.As(err, &ce) {
			if cut >= HeaderSize && slicesContains(starts, cut) && err == nil {
				continue // cut on a chunk boundary: a shorter but valid capture
			}
			t.Fatalf("cut at %d: err = %v, want a CorruptError", cut, err)
		}
		if ce.Kind != Truncated {
			t.Fatalf("cut at %d: kind %v, want truncated", cut, ce.Kind)
		}
		if c == nil {
			t.Fatalf("cut at %d: nil capture", cut)
		}
		// Chunks entirely before the cut are all read.
		n := 0
		for i := 0; i+1 < len(starts) && starts[i+1] <= cut; i++ {
			n++
		}
		if ce.ChunksRead != n || (cut >= HeaderSize && ce.Chunk != n) {
			t.Fatalf("cut at %d: ChunksRead %d, Chunk %d; want %d", cut, ce.ChunksRead, ce.Chunk, n)
		}
		if cut >= HeaderSize && ce.Offset != int64(starts[n]) {
			t.Fatalf("cut at %d: Offset %d, want %d", cut, ce.Offset, starts[n])
		}
		if len(c.Allocs) > len(full.Allocs) || (len(c.Allocs) > 0 && !reflect.DeepEqual(c.Allocs, full.Allocs[:len(c.Allocs)])) {
			t.Fatalf("cut at %d: allocs are not a prefix of the full capture's", cut)
		}
	}
}

// readBothWays reads data with ReadAll and again reading chunks ahead on
// another goroutine (as Load does), and fails the test unless both give
// the same capture and the same error.
func readBothWays(t *testing.T, data []byte) (*Capture, error) {
	t.Helper()
	c, err := ReadAll(bytes.NewReader(data))
	ca, erra := readAll(bytes.NewReader(data), 0, true, nil)
	if ca != nil {
		ca.Resolve()
	}
	if fmt.Sprint(err) != fmt.Sprint(erra) || !reflect.DeepEqual(c, ca) {
		t.Fatalf("%d bytes: reading ahead gave %v (%d allocs), reading in line %v (%d allocs)", len(data), erra, lenAllocs(ca), err, lenAllocs(c))
	}
	return c, err
}

func lenAllocs(c *Capture) int {
	if c == nil {
		return -1
	}
	return len(c.Allocs)
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestFlipBytes damages one byte at many offsets: the reader never panics
// and reports damage in the chunk that holds the byte (or earlier).
func TestFlipBytes(t *testing.T) {
	data := sampleCapture(t)
	starts := chunkStarts(data)
	for off := HeaderSize; off < len(data); off++ {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := append([]byte{}, data...)
			bad[off] ^= mask
			c, err := readBothWays(t, bad)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("flip %#x at %d: err = %v, want a CorruptError", mask, off, err)
			}
			chunk := 0
			for starts[chunk+1] <= off {
				chunk++
			}
			if ce.Chunk > chunk || c == nil {
				t.Fatalf("flip %#x at %d (chunk %d): reported chunk %d (%v)", mask, off, chunk, ce.Chunk, err)
			}
		}
	}
}

func FuzzReadAll(f *testing.F) {
	data := sampleCapture(f)
	f.Add(data)
	f.Add(data[:HeaderSize])
	f.Add(data[:len(data)/2])
	stacks, _ := parentStacks()
	f.Add(writeStacks(f, nil, stacks))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ReadAll(bytes.NewReader(data))
		var ce *CorruptError
		if err != nil && !errors.As(err, &ce) && c != nil {
			t.Fatalf("non-corrupt error %v with a capture", err)
		}
		if c != nil {
			c.Check()
			wholeStacks(t, c)
		}
	})
}

func TestWriterAutoFlush(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	a := &Alloc{Stream: 1, TID: 1, Size: 100, StackID: 1, Func: FuncMalloc}
	for i := range 200_000 {
		a.TimeNano = int64(i) * 1000
		a.Addr = 0x7f0000000000 + uint64(i)*112
		if err := w.Alloc(a); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() <= HeaderSize {
		t.Fatal("no chunk written before Close: auto-flush did not happen")
	}
	w.Close()
	if n := len(chunkStarts(buf.Bytes())) - 1; n < 2 {
		t.Errorf("%d chunks, want several", n)
	}
	c, err := ReadAll(&buf)
	if err != nil || len(c.Allocs) != 200_000 {
		t.Fatalf("read back %d allocs, err %v", len(c.Allocs), err)
	}
}

// TestWriterChunkOverWindow checks that a chunk larger than the encoder's
// window (a record near the body limit makes one) still reads back.
func TestWriterChunkOverWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	half := make([]byte, 3*chunkTarget/2) // random: compresses to about its size
	for i := range half {
		half[i] = 'a' + byte(rng.IntN(26))
	}
	name := string(half) + string(half) // the repeat is farther back than the window
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	write(t, w, &Alloc{Stream: 1, TID: 1, TimeNano: 1, Addr: 0x1000, Size: 8, StackID: 1, Func: FuncMalloc})
	write(t, w, &Location{ID: 1, Lines: []Line{{Function: name, File: "big.c", Line: 7}}})
	write(t, w, &Alloc{Stream: 1, TID: 1, TimeNano: 2, Addr: 0x2000, Size: 8, StackID: 1, Func: FuncMalloc})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint32(buf.Bytes()[HeaderSize:]); n <= chunkTarget {
		t.Fatalf("chunk payload of %d bytes is within the %d byte window", n, chunkTarget)
	}
	c, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Allocs) != 2 || c.Locations[1] == nil || !strings.HasPrefix(c.Locations[1].Lines[0].Function, name[:MaxName]) {
		t.Fatalf("read back %d allocs and location %v", len(c.Allocs), c.Locations[1] != nil)
	}
}

// Names past MaxName are cut at a character boundary, marked and counted,
// so that a report's size cannot be the product of its stacks and one
// capture-supplied name.
func TestReaderShortensLongNames(t *testing.T) {
	long := strings.Repeat("é", MaxName) // 2 bytes each: the cut falls inside one at odd offsets
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	write(t, w, &Mapping{ID: 1, Stream: 1, File: "/lib/" + long})
	write(t, w, &Location{ID: 1, MappingID: 1, Lines: []Line{{Function: "f" + long, File: "short.c", Line: 1}}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if c.Shortened != 2 {
		t.Errorf("Shortened = %d, want 2", c.Shortened)
	}
	for _, s := range []string{c.Mappings[1].File, c.Locations[1].Lines[0].Function} {
		if len(s) > MaxName+32 || !utf8.ValidString(s) || !strings.HasSuffix(s, " bytes cut]") {
			t.Errorf("%d bytes, valid UTF-8 %v, ends %q", len(s), utf8.ValidString(s), s[len(s)-20:])
		}
	}
	if f := c.Locations[1].Lines[0].File; f != "short.c" {
		t.Errorf("a short name changed: %q", f)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n--; f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestWriterErrorsStick(t *testing.T) {
	w, err := NewWriter(&failWriter{n: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.Free(&Free{})
	if err := w.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Flush err = %v", err)
	}
	if err := w.Free(&Free{}); err == nil {
		t.Error("write after a failed flush succeeded")
	}
	if err := w.Stack(&Stack{}); err == nil {
		t.Error("stack with ID 0 accepted")
	}
}

func TestWriterAllocDoesNotAllocate(t *testing.T) {
	w, _ := NewWriter(io.Discard)
	a := &Alloc{Stream: 1, TID: 2, TimeNano: 3, Addr: 4, Size: 5, StackID: 6, Func: 1}
	f := &Free{Stream: 1, TID: 2, TimeNano: 3, Addr: 4}
	w.Alloc(a) // warm the buffers
	if n := testing.AllocsPerRun(1000, func() { w.Alloc(a); w.Free(f) }); n != 0 {
		t.Errorf("Alloc+Free allocate %v times per call", n)
	}
}

// FuzzRecords fuzzes the record decoder: the payload is framed in a valid
// chunk, so mutations reach record parsing instead of stopping at the CRC.
func FuzzRecords(f *testing.F) {
	for _, r := range full() {
		var buf bytes.Buffer
		w, _ := NewWriter(&buf)
		write(f, w, r)
		f.Add(w.pending)
		w.Close()
	}
	stacks, _ := parentStacks() // stacks with parents: whole, and damaged
	var payload []byte
	for _, s := range stacks {
		payload = append(payload, rawRecord(RecStack, encode(&Record{Type: RecStack, Stack: s}, nil))...)
	}
	f.Add(payload)
	f.Add(rawRecord(RecStack, stackBody(2, []uint64{14}, 2, 0)))
	f.Add(append(rawRecord(RecStack, stackBody(1, []uint64{14}, 0, 0)), rawRecord(RecStack, stackBody(2, []uint64{14}, 1, 2))...))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var buf bytes.Buffer
		w, _ := NewWriter(&buf)
		w.Close()
		buf.Write(rawChunk(payload))
		c, err := ReadAll(&buf)
		var ce *CorruptError
		if err != nil && (!errors.As(err, &ce) || ce.Kind != BadRecord) {
			t.Fatalf("err = %v, want nil or a BadRecord CorruptError", err)
		}
		if c == nil {
			t.Fatal("nil capture")
		}
		c.Check()
		wholeStacks(t, c)
	})
}

// wholeStacks fails unless every stack of a capture read is whole: its
// parent resolved, or a placeholder in its place.
func wholeStacks(t *testing.T, c *Capture) {
	for id, s := range c.Stacks {
		if s.Parent != 0 || s.Skip != 0 {
			t.Fatalf("stack %d read with parent %d, skip %d", id, s.Parent, s.Skip)
		}
		for _, l := range s.Locations {
			if c.Locations[l] == nil {
				t.Fatalf("stack %d names location %d, which is not there", id, l)
			}
		}
	}
}

// Dump names every record with its fields, in file order, and on damage
// shows what came before it and the error.
func TestDump(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	for _, r := range full() {
		write(t, w, r)
	}
	write(t, w, &Alloc{Stream: 3, TID: 1, TimeNano: 5, Addr: 0x40, Size: 48, StackID: 2, Func: FuncPyMemMalloc, Origin: 0x77, Method: MethodOpenMP})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Dump(&out, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		fmt.Sprintf("heaplens capture, format version %d\n", Version),
		`Meta     version=1 heaplens="0.1.0-dev" rate=524288`,
		`Process  stream=3 pid=4242 ppid=1`,
		`Location id=11 kind=native mapping=7 address=0x7f0000001234 lines=["inlined_helper" "/src/a.c":10; "outer" "":0; "neg" "x.h":-1]`,
		`Location id=13 kind=python mapping=0 address=0x0 lines=["Cache.load" "":7]`,
		"Stack    id=1099511627776 locations=[11 12 11 13 14]",
		"Alloc    stream=3 tid=4243 t=99000001000 addr=0x555500000010 size=8589934592 stack=1099511627776 func=pvalloc",
		"func=PyMem_Malloc origin=0x77 method=openmp",
		"Free     stream=3 tid=4243",
		"End      stream=3 t=99100000000 known=true exit=-1 signaled=true signal=9 exec=true dropped_allocs=12",
		"RSS      stream=3",
		`Note     stream=3 "pid 4242: 2 malformed ring records were skipped"`,
		"# 1 chunks, 0 records of unknown types skipped, 0 long names cut\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dump lacks %q:\n%s", want, got)
		}
	}
	// Cut inside the chunk: the header line, then the error.
	out.Reset()
	err := Dump(&out, bytes.NewReader(buf.Bytes()[:len(buf.Bytes())-10]))
	if _, ok := err.(*CorruptError); !ok || !strings.Contains(out.String(), "# capture: corrupt chunk 0") {
		t.Errorf("damaged: %v\n%s", err, out.String())
	}
}

// TestRecordSizes keeps the records a large capture holds by the million
// small: a 10-million-sample capture holds 10 million Allocs.
func TestRecordSizes(t *testing.T) {
	if s := unsafe.Sizeof(Alloc{}); s != 56 {
		t.Errorf("Alloc takes %d bytes, want 56 (order the fields so that padding is not wasted)", s)
	}
	if s := unsafe.Sizeof(Free{}); s != 24 {
		t.Errorf("Free takes %d bytes, want 24", s)
	}
}

// LoadEvents hands the events on in file order and keeps the rest, as
// Load; ScanEvents reads the same events again, up to a count.
func TestLoadAndScanEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.heaplens")
	if err := os.WriteFile(path, sampleCapture(t), 0o644); err != nil {
		t.Fatal(err)
	}
	whole, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []Record
	c, err := LoadEvents(path, func(r *Record) { events = append(events, *r) })
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Allocs)+len(c.Frees)+len(c.FreeOrder) != 0 || len(events) != len(whole.Allocs)+len(whole.Frees) {
		t.Fatalf("LoadEvents kept %d allocs and %d frees, handed on %d events", len(c.Allocs), len(c.Frees), len(events))
	}
	var a, f int
	for i, r := range events { // file order: each Free after FreeOrder of the Allocs
		switch {
		case r.Type == RecAlloc && r.Alloc == whole.Allocs[a] && (f == len(whole.Frees) || int(whole.FreeOrder[f]) > a):
			a++
		case r.Type == RecFree && r.Free == whole.Frees[f] && int(whole.FreeOrder[f]) == a:
			f++
		default:
			t.Fatalf("event %d: %+v, out of file order", i, r)
		}
	}
	if len(c.Stacks) != len(whole.Stacks) || len(c.Locations) != len(whole.Locations) || len(c.Ends) != len(whole.Ends) || c.Meta.Rate != whole.Meta.Rate {
		t.Errorf("LoadEvents kept %d stacks, %d locations, %d ends; Load %d, %d, %d", len(c.Stacks), len(c.Locations), len(c.Ends), len(whole.Stacks), len(whole.Locations), len(whole.Ends))
	}
	want := []string{
		"1 allocs or frees name an unknown stream (e.g. stream 4294967295)",
		"1 end records name an unknown stream (e.g. stream 4)",
	}
	if !reflect.DeepEqual(c.Problems, want) {
		t.Errorf("Problems = %q, want %q", c.Problems, want)
	}
	for _, n := range []int{len(events), 10} {
		var again []Record
		if err := ScanEvents(path, n, func(r *Record) bool { again = append(again, *r); return true }); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, events[:n]) {
			t.Errorf("ScanEvents of %d: %d events, not LoadEvents' first", n, len(again))
		}
	}
	stopped := 0
	if err := ScanEvents(path, len(events), func(*Record) bool { stopped++; return stopped < 3 }); err != nil || stopped != 3 {
		t.Errorf("ScanEvents went on after fn said stop: %d events, %v", stopped, err)
	}
	if err := ScanEvents(path, len(events)+1, func(*Record) bool { return true }); err == nil || !strings.Contains(err.Error(), "changed while it was read") {
		t.Errorf("ScanEvents of more events than the file holds: %v", err)
	}
}

// A Skeleton of a capture as it is written is what LoadEvents reads back
// of the file, and it hands on the same events; beside another observer.
func TestSkeleton(t *testing.T) {
	var seen, again []Record
	sk := NewSkeleton(func(r *Record) { seen = append(seen, *r) })
	var other counter
	data := sampleCaptureTo(t, Observers(&other, sk))
	path := filepath.Join(t.TempDir(), "x.heaplens")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := LoadEvents(path, func(r *Record) { again = append(again, *r) })
	if err != nil {
		t.Fatal(err)
	}
	got, err := sk.Capture()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Skeleton:\n%+v\nLoadEvents:\n%+v", got, want)
	}
	if got.Shortened != 1 || !strings.HasSuffix(got.Locations[99].Lines[0].Function, "bytes cut]") {
		t.Errorf("the long name was not shortened as a reader does: %d shortened", got.Shortened)
	}
	if !reflect.DeepEqual(seen, again) || len(seen) != 453 {
		t.Errorf("Skeleton handed on %d events, LoadEvents %d", len(seen), len(again))
	}
	if other.n != len(full())+1+450 { // full(), the long name, the loop's 300 Allocs and 150 Frees
		t.Errorf("the other observer saw %d records", other.n)
	}
	if _, err := NewSkeleton(nil).Capture(); err != nil {
		t.Errorf("an empty Skeleton: %v", err)
	}
	bare := NewSkeleton(nil)
	bare.Observe(&Record{Type: RecMeta, Meta: &Meta{}})
	if _, err := bare.Capture(); err == nil {
		t.Error("a Skeleton fed without bodies says nothing")
	}
}

type counter struct{ n int }

func (c *counter) Observe(*Record) { c.n++ }

// keeper is an Observer that keeps the Stacks it is shown.
type keeper struct{ stacks []*Stack }

func (k *keeper) Observe(r *Record) {
	if r.Type == RecStack {
		k.stacks = append(k.stacks, r.Stack)
	}
}

// A Writer keeps nothing of a Stack it writes: its caller reuses one
// Stack and its Locations, and the file and an Observer that keeps what it
// is shown both have every stack as it was written.
func TestStackReused(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var k keeper
	w.SetObserver(&k)
	var st Stack
	want := map[uint64][]uint64{}
	for i := range uint64(3) {
		st.ID, st.Locations = i+1, append(st.Locations[:0], 10+i, 20+i, 30+i)
		want[st.ID] = slices.Clone(st.Locations)
		if err := w.Stack(&st); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := ReadAll(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for id, locs := range want {
		if got := c.Stacks[id]; got == nil || !slices.Equal(got.Locations, locs) {
			t.Errorf("stack %d read back as %v, want %v", id, got, locs)
		}
	}
	if len(k.stacks) != 3 {
		t.Fatalf("the observer saw %d stacks, want 3", len(k.stacks))
	}
	for _, s := range k.stacks {
		if !slices.Equal(s.Locations, want[s.ID]) {
			t.Errorf("the observer's stack %d is %v, want %v", s.ID, s.Locations, want[s.ID])
		}
	}
}
