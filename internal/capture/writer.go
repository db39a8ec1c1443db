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
// After a write error every method returns that error: a capture with a hole
// in the middle would be misread as complete.
type Writer struct {
	w       io.Writer
	enc     *zstd.Encoder
	pending []byte // uncompressed records of the current chunk
	scratch []byte // one record body, reused so hot records do not allocate
	out     []byte // chunk header + compressed payload, reused
	err     error
	chunks  int
	closed  bool
}

// NewWriter writes the file header to w and returns a Writer for the
// records. The caller closes w after Close.
func NewWriter(w io.Writer) (*Writer, error) {
	// Level: SpeedDefault compresses Alloc records well at hundreds of MB/s,
	// far above the rate the agent produces them. One goroutine: chunks are
	// encoded synchronously with EncodeAll, and extra workers would only add
	// memory.
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false)) // the chunk CRC-32C already covers the payload
	if err != nil {
		return nil, fmt.Errorf("capture: creating zstd encoder: %w", err)
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

// record appends one record whose body is in w.scratch to the pending chunk.
func (w *Writer) record(t RecordType) error {
	if len(w.scratch) > MaxRecordBody {
		return fmt.Errorf("capture: %v record body of %d bytes exceeds the %d byte limit", t, len(w.scratch), MaxRecordBody)
	}
	w.pending = append(w.pending, byte(t))
	w.pending = binary.AppendUvarint(w.pending, uint64(len(w.scratch)))
	w.pending = append(w.pending, w.scratch...)
	if len(w.pending) >= chunkTarget {
		return w.Flush()
	}
	return nil
}

// Meta writes the run description. It should be the first record.
func (w *Writer) Meta(m *Meta) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendMeta(w.scratch[:0], m)
	return w.record(RecMeta)
}

// Process writes a stream's process description.
func (w *Writer) Process(p *Process) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendProcess(w.scratch[:0], p)
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
	return w.record(RecStack)
}

// Alloc writes a sampled allocation. It does not allocate.
func (w *Writer) Alloc(a *Alloc) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendAlloc(w.scratch[:0], a)
	return w.record(RecAlloc)
}

// Free writes the release of a sampled allocation. It does not allocate.
func (w *Writer) Free(f *Free) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendFree(w.scratch[:0], f)
	return w.record(RecFree)
}

// End writes how a stream finished and what it lost.
func (w *Writer) End(e *End) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendEnd(w.scratch[:0], e)
	return w.record(RecEnd)
}

// RSS writes a resident-set-size sample of a stream's process.
func (w *Writer) RSS(r *RSS) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendRSS(w.scratch[:0], r)
	return w.record(RecRSS)
}

// Origin writes the stack of a thread that had work done by a pool.
func (w *Writer) Origin(o *Origin) error {
	if w.err != nil {
		return w.err
	}
	w.scratch = appendOrigin(w.scratch[:0], o)
	return w.record(RecOrigin)
}

// Flush compresses the pending records, however few, into one chunk and
// writes it, so that everything written so far survives if the process is
// killed. It writes nothing when no records are pending.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.pending) == 0 {
		return nil
	}
	w.out = append(w.out[:0], 0, 0, 0, 0, 0, 0, 0, 0) // chunk header, filled below
	w.out = w.enc.EncodeAll(w.pending, w.out)
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
	w.closed = true
	w.err = fmt.Errorf("capture: writer is closed")
	return nil
}
