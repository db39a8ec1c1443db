package capture

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

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
	rec     Record // what obs is shown, reused: a record it keeps is copied
}

// An Observer sees every record a Writer writes, as it is written: a
// continuous profile kept beside the file (internal/fleet). It runs on the
// writer's goroutine, so it must be quick; it must not modify the records,
// and must copy the Record to keep it (the Writer reuses it), though it may
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
	return &Writer{
		w:       w,
		enc:     enc,
		pending: make([]byte, 0, chunkTarget+4096),
		scratch: make([]byte, 0, 256),
	}, nil
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

// Meta writes the run description. It should be the first record.
func (w *Writer) Meta(m *Meta) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendMeta(w.scratch[:0], m)
	if w.obs != nil {
		w.rec = Record{Type: RecMeta, Meta: m}
		w.observe()
	}
	return w.record(RecMeta)
}

// Process writes a stream's process description.
func (w *Writer) Process(p *Process) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendProcess(w.scratch[:0], p)
	if w.obs != nil {
		w.rec = Record{Type: RecProcess, Process: p}
		w.observe()
	}
	return w.record(RecProcess)
}

// Mapping writes a loaded module. Mapping.ID must not be 0.
func (w *Writer) Mapping(m *Mapping) error {
	if w.err != nil {
		return w.err
	}
	if m.ID == 0 {
		return fmt.Errorf("capture: mapping %q has reserved ID 0", m.File)
	}
	w.scratch = appendMapping(w.scratch[:0], m)
	if w.obs != nil {
		w.rec = Record{Type: RecMapping, Mapping: m}
		w.observe()
	}
	return w.record(RecMapping)
}

// Location writes a symbolized program counter. Location.ID must not be 0.
func (w *Writer) Location(l *Location) error {
	if w.err != nil {
		return w.err
	}
	if l.ID == 0 {
		return fmt.Errorf("capture: location at %#x has reserved ID 0", l.Address)
	}
	w.scratch = appendLocation(w.scratch[:0], l)
	if w.obs != nil {
		w.rec = Record{Type: RecLocation, Location: l}
		w.observe()
	}
	return w.record(RecLocation)
}

// Stack writes a call stack. Stack.ID must not be 0.
func (w *Writer) Stack(s *Stack) error {
	if w.err != nil {
		return w.err
	}
	if s.ID == 0 {
		return fmt.Errorf("capture: stack has reserved ID 0")
	}
	w.scratch = appendStack(w.scratch[:0], s)
	if w.obs != nil {
		w.rec = Record{Type: RecStack, Stack: s}
		w.observe()
	}
	return w.record(RecStack)
}

// Alloc writes a sampled allocation. It does not allocate.
func (w *Writer) Alloc(a *Alloc) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendAlloc(w.scratch[:0], a, &w.base)
	if w.obs != nil {
		w.rec = Record{Type: RecAlloc, Alloc: *a}
		w.observe()
	}
	return w.record(RecAlloc)
}

// Free writes the release of a sampled allocation. It does not allocate.
func (w *Writer) Free(f *Free) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendFree(w.scratch[:0], f, &w.base)
	if w.obs != nil {
		w.rec = Record{Type: RecFree, Free: *f}
		w.observe()
	}
	return w.record(RecFree)
}

// End writes how a stream finished and what it lost.
func (w *Writer) End(e *End) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendEnd(w.scratch[:0], e)
	if w.obs != nil {
		w.rec = Record{Type: RecEnd, End: e}
		w.observe()
	}
	return w.record(RecEnd)
}

// RSS writes a resident-set-size sample of a stream's process.
func (w *Writer) RSS(r *RSS) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendRSS(w.scratch[:0], r)
	if w.obs != nil {
		w.rec = Record{Type: RecRSS, RSS: *r}
		w.observe()
	}
	return w.record(RecRSS)
}

// Note writes something a reader should be told.
func (w *Writer) Note(n *Note) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendNote(w.scratch[:0], n)
	if w.obs != nil {
		w.rec = Record{Type: RecNote, Note: n}
		w.observe()
	}
	return w.record(RecNote)
}

// Resident writes how much of a large block was resident.
func (w *Writer) Resident(r *Resident) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendResident(w.scratch[:0], r)
	if w.obs != nil {
		w.rec = Record{Type: RecResident, Resident: *r}
		w.observe()
	}
	return w.record(RecResident)
}

// Malloc writes what glibc's malloc held.
func (w *Writer) Malloc(m *Malloc) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendMalloc(w.scratch[:0], m)
	if w.obs != nil {
		w.rec = Record{Type: RecMalloc, Malloc: *m}
		w.observe()
	}
	return w.record(RecMalloc)
}

// Mark writes a point in time the program named (heaplens_mark).
func (w *Writer) Mark(m *Mark) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendMark(w.scratch[:0], m)
	if w.obs != nil {
		w.rec = Record{Type: RecMark, Mark: *m}
		w.observe()
	}
	return w.record(RecMark)
}

// Origin writes the stack of a thread that had work done by a pool.
func (w *Writer) Origin(o *Origin) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendOrigin(w.scratch[:0], o)
	if w.obs != nil {
		w.rec = Record{Type: RecOrigin, Origin: *o}
		w.observe()
	}
	return w.record(RecOrigin)
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
