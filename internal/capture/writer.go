package capture

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// castagnoli is the CRC-32C table used for chunk checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// A Writer writes a capture file (docs/capture-format.md). Records are
// buffered into a chunk that is compressed and written when it reaches about
// 1 MiB uncompressed, on Flush, and on Close. A Writer is not safe for
// concurrent use.
//
// Chunks that Flush or Close end are compressed harder than chunks that
// fill up: the agent flushes about once a second, so a chunk fills only when
// records arrive faster than ~1 MiB/s, at high sampling rates, where the
// agent's CPU matters more than the capture's last few percent.
//
// After a write error every method returns that error: a capture with a hole
// in the middle would be misread as complete.
type Writer struct {
	w       io.Writer
	enc     *zstd.Encoder // for chunks ended by Flush and Close
	fast    *zstd.Encoder // for chunks that filled up; made on first use
	pending []byte        // uncompressed records of the current chunk
	scratch []byte        // one record body, reused so hot records do not allocate
	out     []byte        // chunk header + compressed payload, reused
	base    eventBase     // the pending chunk's last event
	err     error
	chunks  int
	closed  bool
	obs     Observer
	rec     Record // the record being written, and what obs is shown
	cod     codec  // encodes rec: in the Writer, so that encoding does not allocate
}

// An Observer sees every record a Writer writes, as it is written: a
// continuous profile kept beside the file (internal/fleet). It runs on the
// writer's goroutine, so it must be quick; it must not modify the records,
// and must copy the Record to keep it (the Writer reuses it, and only its
// field that Type names is current), though it may
// keep the pointed-to records (Process, Mapping, Location, Stack, End,
// Note), which the writer's callers never change after writing.
type Observer interface {
	Observe(r *Record)
}

// SetObserver makes o see every record written from now on.
func (w *Writer) SetObserver(o Observer) { w.obs = o }

// bodyObserver is an Observer that also gets each record's encoded body
// (Skeleton, Observers).
type bodyObserver interface {
	observeBody(r *Record, body []byte)
}

// observe hands w.rec, whose body is in w.scratch, to the observer.
func (w *Writer) observe() { observeOne(w.obs, &w.rec, w.scratch) }

// observeOne hands a record to o, with its body if o takes bodies.
func observeOne(o Observer, r *Record, body []byte) {
	if b, ok := o.(bodyObserver); ok {
		b.observeBody(r, body)
		return
	}
	o.Observe(r)
}

// Observers returns an Observer that hands every record to each of os.
func Observers(os ...Observer) Observer { return observers(os) }

type observers []Observer

func (os observers) Observe(r *Record) {
	for _, o := range os {
		o.Observe(r)
	}
}

func (os observers) observeBody(r *Record, body []byte) {
	for _, o := range os {
		observeOne(o, r, body)
	}
}

// NewWriter writes the file header to w and returns a Writer for the
// records. The caller closes w after Close.
func NewWriter(w io.Writer) (*Writer, error) {
	enc, err := newEncoder(zstd.SpeedBetterCompression)
	if err != nil {
		return nil, err
	}
	var hdr [HeaderSize]byte
	copy(hdr[:], Magic)
	binary.LittleEndian.PutUint32(hdr[8:], Version)
	binary.LittleEndian.PutUint32(hdr[12:], 0) // flags
	if _, err := w.Write(hdr[:]); err != nil {
		return nil, fmt.Errorf("capture: writing header: %w", err)
	}
	wr := &Writer{
		w:       w,
		enc:     enc,
		pending: make([]byte, 0, chunkTarget+4096),
		scratch: make([]byte, 0, 256),
	}
	wr.cod.base = &wr.base
	return wr, nil
}

// newEncoder returns a zstd encoder for chunk payloads.
//
// Level: captures are mostly Alloc and Free records whose time and address
// deltas are close to incompressible, so the level matters little.
// SpeedBetterCompression makes the benchmark captures 1–8 % smaller than
// SpeedDefault but costs about 150 ns more per record: nothing at the
// default rate, a third more agent CPU at --rate 1, hence SpeedFastest for
// full chunks, which on delta-coded events (version 2) is both faster and
// smaller than SpeedDefault (cpp_maps at --rate 1: 93 ms and 6.2 MB against
// 117 ms and 6.9 MB). SpeedBestCompression would save 2–5 % more at
// ~20 MB/s with 34 MB of match tables, more than the rest of the agent.
//
// Window: a chunk is about chunkTarget bytes and never refers to another,
// so a larger window finds nothing more; the default 8 MiB window only
// costs history buffers (encoder heap 21 MB instead of 6).
//
// One goroutine: chunks are encoded synchronously with EncodeAll, and extra
// workers would only add memory.
func newEncoder(level zstd.EncoderLevel) (*zstd.Encoder, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(level),
		zstd.WithWindowSize(chunkTarget),
		zstd.WithLowerEncoderMem(true),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false)) // the chunk CRC-32C already covers the payload
	if err != nil {
		return nil, fmt.Errorf("capture: creating zstd encoder: %w", err)
	}
	return enc, nil
}

// record appends one record whose body is in w.scratch to the pending chunk.
func (w *Writer) record(t RecordType) error {
	if len(w.scratch) > MaxRecordBody {
		return fmt.Errorf("capture: %v record body of %d bytes exceeds the %d byte limit", t, len(w.scratch), MaxRecordBody)
	}
	w.pending = append(w.pending, byte(t))
	w.pending = binary.AppendUvarint(w.pending, uint64(len(w.scratch)))
	w.pending = append(w.pending, w.scratch...)
	if len(w.pending) >= chunkTarget {
		return w.flush(true)
	}
	return nil
}

// WriteRecord writes a record of any type: the field of r.Type.
func (w *Writer) WriteRecord(r *Record) error {
	if !r.Type.known() {
		return fmt.Errorf("capture: writing a record of unknown %v", r.Type)
	}
	w.rec = *r
	return w.write(w.rec.body())
}

// write writes w.rec, whose fields are b. An ID of 0 fails this record
// only; an error writing the file sticks.
func (w *Writer) write(b body) error {
	if w.err != nil {
		return w.err
	}
	w.cod.b, w.cod.err = w.scratch[:0], nil
	b.code(&w.cod)
	w.scratch = w.cod.b
	if w.cod.err != nil {
		return fmt.Errorf("capture: %v record: %w", w.rec.Type, w.cod.err)
	}
	if w.obs != nil {
		w.observe()
	}
	return w.record(w.rec.Type)
}

// The typed writers set only their field of w.rec (others are stale, as
// Observers are told): the hot ones then copy 56 bytes, not a Record.

// Meta writes the run description. It should be the first record.
func (w *Writer) Meta(m *Meta) error { w.rec.Type, w.rec.Meta = RecMeta, m; return w.write(m) }

// Process writes a stream's process description.
func (w *Writer) Process(p *Process) error {
	w.rec.Type, w.rec.Process = RecProcess, p
	return w.write(p)
}

// Mapping writes a loaded module. Mapping.ID must not be 0.
func (w *Writer) Mapping(m *Mapping) error {
	w.rec.Type, w.rec.Mapping = RecMapping, m
	return w.write(m)
}

// Location writes a symbolized program counter. Location.ID must not be 0.
func (w *Writer) Location(l *Location) error {
	w.rec.Type, w.rec.Location = RecLocation, l
	return w.write(l)
}

// Stack writes a call stack. Stack.ID must not be 0. s.Locations are
// whole; with a Parent, written before, the record leaves out the last
// s.Inherited of them, which must be the parent's from s.Skip on. The
// writer keeps nothing of s: the caller may reuse it and its Locations (an
// Observer is shown a copy, whole, without the parent). At --rate 1 a real
// library's program writes hundreds of thousands of stacks of ~100
// Locations.
func (w *Writer) Stack(s *Stack) error {
	w.rec.Type, w.rec.Stack = RecStack, s
	if w.obs != nil {
		w.rec.Stack = &Stack{ID: s.ID, Locations: slices.Clone(s.Locations)}
	}
	err := w.write(s)
	w.rec.Stack = nil
	return err
}

// Alloc writes a sampled allocation. It does not allocate.
func (w *Writer) Alloc(a *Alloc) error {
	w.rec.Type, w.rec.Alloc = RecAlloc, *a
	return w.write(&w.rec.Alloc)
}

// Free writes the release of a sampled allocation. It does not allocate.
func (w *Writer) Free(f *Free) error {
	w.rec.Type, w.rec.Free = RecFree, *f
	return w.write(&w.rec.Free)
}

// End writes how a stream finished and what it lost.
func (w *Writer) End(e *End) error { w.rec.Type, w.rec.End = RecEnd, e; return w.write(e) }

// RSS writes a resident-set-size sample of a stream's process.
func (w *Writer) RSS(r *RSS) error { w.rec.Type, w.rec.RSS = RecRSS, *r; return w.write(&w.rec.RSS) }

// Note writes something a reader should be told.
func (w *Writer) Note(n *Note) error { w.rec.Type, w.rec.Note = RecNote, n; return w.write(n) }

// Resident writes how much of a large block was resident.
func (w *Writer) Resident(r *Resident) error {
	w.rec.Type, w.rec.Resident = RecResident, *r
	return w.write(&w.rec.Resident)
}

// Malloc writes what glibc's malloc held.
func (w *Writer) Malloc(m *Malloc) error {
	w.rec.Type, w.rec.Malloc = RecMalloc, *m
	return w.write(&w.rec.Malloc)
}

// Mark writes a point in time the program named (heaplens_mark).
func (w *Writer) Mark(m *Mark) error {
	w.rec.Type, w.rec.Mark = RecMark, *m
	return w.write(&w.rec.Mark)
}

// Origin writes the stack of a thread that had work done by a pool.
func (w *Writer) Origin(o *Origin) error {
	w.rec.Type, w.rec.Origin = RecOrigin, *o
	return w.write(&w.rec.Origin)
}

// Flush compresses the pending records, however few, into one chunk and
// writes it, so that everything written so far survives if the process is
// killed. It writes nothing when no records are pending.
func (w *Writer) Flush() error { return w.flush(false) }

// flush writes the pending records as one chunk; full says the chunk ended
// because it reached chunkTarget.
func (w *Writer) flush(full bool) error {
	if w.err != nil {
		return w.err
	}
	if len(w.pending) == 0 {
		return nil
	}
	enc := w.enc
	if full {
		if w.fast == nil {
			if w.fast, w.err = newEncoder(zstd.SpeedFastest); w.err != nil {
				return w.err
			}
		}
		enc = w.fast
	}
	w.out = append(w.out[:0], 0, 0, 0, 0, 0, 0, 0, 0) // chunk header, filled below
	w.out = enc.EncodeAll(w.pending, w.out)
	payload := w.out[chunkHeaderSize:]
	if len(payload) > MaxChunkPayload { // cannot happen with the record limit; checked so the file stays readable
		w.err = fmt.Errorf("capture: chunk %d compressed to %d bytes, over the %d byte limit", w.chunks, len(payload), MaxChunkPayload)
		return w.err
	}
	binary.LittleEndian.PutUint32(w.out[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(w.out[4:], crc32.Checksum(payload, castagnoli))
	if _, err := w.w.Write(w.out); err != nil {
		w.err = fmt.Errorf("capture: writing chunk %d: %w", w.chunks, err)
		return w.err
	}
	w.chunks++
	w.pending = w.pending[:0]
	w.base = eventBase{}
	return nil
}

// Close flushes pending records. It does not close the underlying writer.
// Later calls to write methods fail.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	if err := w.Flush(); err != nil {
		return err
	}
	w.enc.Close()
	if w.fast != nil {
		w.fast.Close()
	}
	w.closed = true
	w.err = fmt.Errorf("capture: writer is closed")
	return nil
}
