package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

// CorruptKind says what is wrong with a damaged capture.
type CorruptKind int

// Kinds of damage.
const (
	// Truncated: the file ends inside the header, a chunk header or a chunk
	// payload. This is what a killed agent leaves behind.
	Truncated CorruptKind = iota + 1
	// BadChunkLength: a chunk length is 0 or over MaxChunkPayload.
	BadChunkLength
	// CRCMismatch: a chunk payload does not match its CRC-32C.
	CRCMismatch
	// BadZstd: a chunk payload passed its CRC but is not valid zstd data,
	// or decompresses to more than MaxChunkPayload bytes.
	BadZstd
	// BadRecord: a decompressed record is malformed.
	BadRecord
)

// String names the kind of damage as error messages show it.
func (k CorruptKind) String() string {
	switch k {
	case Truncated:
		return "truncated"
	case BadChunkLength:
		return "bad chunk length"
	case CRCMismatch:
		return "CRC mismatch"
	case BadZstd:
		return "bad zstd data"
	case BadRecord:
		return "bad record"
	}
	return fmt.Sprintf("CorruptKind(%d)", int(k))
}

// A CorruptError reports where and how a capture is damaged. Everything
// before the damage was read; nothing after it is.
type CorruptError struct {
	Path       string      // file name, when known
	Offset     int64       // file offset of the damaged chunk (or of the header)
	Chunk      int         // index of the damaged chunk, -1 for the file header
	Kind       CorruptKind // what is wrong
	ChunksRead int         // complete chunks read before the damage
	Err        error       // details
}

func (e *CorruptError) Error() string {
	where := fmt.Sprintf("chunk %d at byte %d", e.Chunk, e.Offset)
	if e.Chunk < 0 {
		where = "file header"
	}
	name := "capture"
	if e.Path != "" {
		name = e.Path
	}
	return fmt.Sprintf("%s: corrupt %s: %v: %v (%d complete chunks read)", name, where, e.Kind, e.Err, e.ChunksRead)
}

// Unwrap returns the detail error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Record is one record. Type says which field is set (recordTypes). Pointer
// fields are freshly allocated and may be kept; Alloc and Free are values
// overwritten by the next call to Reader.Next, so that the hot records are
// decoded without allocating.
type Record struct {
	Type     RecordType
	Meta     *Meta
	Process  *Process
	Mapping  *Mapping
	Location *Location
	Stack    *Stack
	Alloc    Alloc
	Free     Free
	End      *End
	RSS      RSS
	Origin   Origin
	Note     *Note
	Mark     Mark
	Malloc   Malloc
	Resident Resident
}

// A Reader reads records from a capture stream in file order.
type Reader struct {
	r       io.Reader
	version uint32

	off        int64 // file offset of the next unread byte
	chunk      int   // index of the chunk in payload (or next to read)
	chunkOff   int64 // file offset of the chunk in payload
	chunksRead int   // chunks completely decoded
	shortened  int   // names cut to MaxName
	inChunk    bool  // payload holds a chunk whose records are being read

	comp    []byte    // compressed payload, reused
	payload []byte    // decompressed payload, reused
	pos     int       // next record in payload
	base    eventBase // the chunk's last event so far (version 2)

	rec     Record
	cod     codec // decodes rec: in the Reader, so that decoding does not allocate
	skipped int
	err     error

	// With ReadAhead: chunks come from ahead, and their buffers go back to
	// the reading goroutine through spare once read; stop ends it.
	ahead chan chunk
	spare chan chunk
	stop  chan struct{}
	pre   []decodedEvent // the chunk's events ReadAhead decoded
	npre  int            // pre[:npre] are read
	// recEvent: rec holds an event, so no field but Type, Alloc and Free is set.
	recEvent bool
}

// decoder is shared: DecodeAll is safe for concurrent use and a Decoder
// holds sizeable buffers.
var (
	zdecOnce sync.Once
	zdec     *zstd.Decoder
	zdecErr  error
)

func zstdDecoder() (*zstd.Decoder, error) {
	zdecOnce.Do(func() {
		zdec, zdecErr = zstd.NewReader(nil,
			zstd.WithDecoderMaxMemory(MaxChunkPayload),
			zstd.WithDecoderMaxWindow(MaxChunkPayload))
	})
	return zdec, zdecErr
}

// NewReader reads and checks the file header. A stream that does not start
// with the magic is "not a heaplens capture"; a newer format version is
// refused with an error naming both versions. A stream that ends inside the
// header returns a *CorruptError.
func NewReader(r io.Reader) (*Reader, error) { return newReader(r, Version) }

// newReader is NewReader for a reader of versions up to newest.
func newReader(r io.Reader, newest uint32) (*Reader, error) {
	if _, err := zstdDecoder(); err != nil {
		return nil, fmt.Errorf("capture: creating zstd decoder: %w", err)
	}
	var hdr [HeaderSize]byte
	n, err := io.ReadFull(r, hdr[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("capture: reading header: %w", err)
	}
	m := min(n, len(Magic))
	if !bytes.Equal(hdr[:m], []byte(Magic[:m])) {
		return nil, errors.New("not a heaplens capture (bad magic)")
	}
	if n < HeaderSize {
		return nil, &CorruptError{Chunk: -1, Kind: Truncated,
			Err: fmt.Errorf("file ends after %d of %d header bytes", n, HeaderSize)}
	}
	version := binary.LittleEndian.Uint32(hdr[8:])
	flags := binary.LittleEndian.Uint32(hdr[12:])
	switch {
	case version == 0:
		return nil, errors.New("not a heaplens capture (format version 0)")
	case version > newest:
		return nil, fmt.Errorf("capture format version %d is newer than this heaplens supports (%d)", version, newest)
	case flags != 0:
		// Flags announce changes an older reader would misread; none are
		// defined.
		return nil, fmt.Errorf("capture uses header flags %#x that this heaplens does not support", flags)
	}
	return &Reader{r: r, version: version, off: HeaderSize}, nil
}

// Version returns the format version from the file header.
func (r *Reader) Version() uint32 { return r.version }

// Skipped returns how many records of unknown type were skipped so far.
func (r *Reader) Skipped() int { return r.skipped }

// ChunksRead returns how many chunks were completely decoded so far.
func (r *Reader) ChunksRead() int { return r.chunksRead }

// Next returns the next record. It returns io.EOF at the clean end of the
// stream and a *CorruptError at damage; after an error it keeps returning
// it. The returned Record is reused by the next call (see Record).
func (r *Reader) Next() (*Record, error) {
	for r.err == nil {
		if !r.inChunk || r.pos >= len(r.payload) {
			if r.inChunk {
				r.inChunk = false
				r.chunksRead++
				r.chunk++
			}
			r.err = r.readChunk()
			continue
		}
		if r.npre < len(r.pre) && int(r.pre[r.npre].start) == r.pos {
			return r.decoded(), nil
		}
		t, body, err := r.split()
		if err != nil {
			r.err = r.corrupt(BadRecord, err)
			break
		}
		rec, err := r.decode(t, body)
		if err != nil {
			r.err = r.corrupt(BadRecord, fmt.Errorf("%v record ending at payload byte %d: %w", t, r.pos, err))
			break
		}
		if rec != nil {
			return rec, nil
		}
		r.skipped++
	}
	return nil, r.err
}

// decoded returns the next event that ReadAhead decoded.
func (r *Reader) decoded() *Record {
	e := &r.pre[r.npre]
	r.npre++
	r.pos = int(e.end)
	r.base = eventBase{e.a.TimeNano, e.a.Addr} // for Next, should it decode the next event itself
	rec := &r.rec
	if !r.recEvent { // clear what another record left (an event leaves only these fields)
		*rec = Record{}
		r.recEvent = true
	}
	rec.Type = RecordType(r.payload[e.start])
	if rec.Type == RecAlloc {
		rec.Alloc, rec.Free = e.a, Free{}
	} else {
		rec.Alloc, rec.Free = Alloc{}, Free{Stream: e.a.Stream, TID: e.a.TID, TimeNano: e.a.TimeNano, Addr: e.a.Addr}
	}
	return rec
}

// split cuts the next record (type, body) out of the payload.
func (r *Reader) split() (RecordType, []byte, error) {
	t, body, next, err := splitAt(r.payload, r.pos)
	if err == nil {
		r.pos = next
	}
	return t, body, err
}

// splitAt cuts the record at pos (type, body) out of payload and returns
// where the next one starts.
func splitAt(payload []byte, pos int) (RecordType, []byte, int, error) {
	t := RecordType(payload[pos])
	n, k := binary.Uvarint(payload[pos+1:])
	if k <= 0 {
		return 0, nil, 0, fmt.Errorf("record at payload byte %d: malformed body length", pos)
	}
	p := pos + 1 + k
	if n > MaxRecordBody || n > uint64(len(payload)-p) {
		return 0, nil, 0, fmt.Errorf("%v record at payload byte %d: body length %d: %w", t, pos, n, errBodySize)
	}
	return t, payload[p : p+int(n)], p + int(n), nil
}

// MaxName bounds the function, source file and module names a reader keeps:
// they are repeated in every stack a report prints, so a capture must not
// make a report's size the product of its stacks and its longest name.
// The longest real names (C++ template instances) stay far below it.
const MaxName = 16 << 10

// shortName cuts a name longer than MaxName bytes at a character boundary,
// marking the cut.
func shortName(s string) string {
	cut := MaxName
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…[%d bytes cut]", len(s)-cut)
}

// Shortened returns how many names longer than MaxName were cut.
func (r *Reader) Shortened() int { return r.shortened }

// decode decodes a known record into r.rec. It returns nil, nil for an
// unknown type, which the caller skips.
func (r *Reader) decode(t RecordType, body []byte) (*Record, error) {
	if !t.known() {
		return nil, nil
	}
	rec := &r.rec
	*rec = Record{Type: t}
	r.recEvent = t == RecAlloc || t == RecFree
	r.cod = codec{b: body, dec: true, base: r.eventBase()}
	rec.body().code(&r.cod)
	r.shortened += r.cod.short
	if r.cod.err != nil {
		return nil, r.cod.err
	}
	return rec, nil
}

// eventBase is what events are decoded relative to: nil (whole values) in
// version 1.
func (r *Reader) eventBase() *eventBase {
	if r.version < 2 {
		return nil
	}
	return &r.base
}

// readChunk reads, checks and decompresses the next chunk into r.payload.
// It returns io.EOF when the stream ends exactly at a chunk boundary.
func (r *Reader) readChunk() error {
	var ch chunk
	if r.ahead != nil {
		if r.payload != nil {
			r.spare <- chunk{payload: r.payload, events: r.pre[:0]} // the previous chunk's, read
		}
		var ok bool
		if ch, ok = <-r.ahead; !ok {
			return errors.New("capture: reader used after Close")
		}
	} else {
		ch = fetch(r.r, r.off, r.comp, r.payload)
		r.comp = ch.comp
	}
	r.chunkOff, r.off, r.payload = ch.off, ch.end, ch.payload
	r.pre, r.npre = ch.events, 0
	if ch.err != nil {
		if ch.kind != 0 {
			return r.corrupt(ch.kind, ch.err)
		}
		if ch.err != io.EOF {
			return fmt.Errorf("capture: reading chunk %d at byte %d: %w", r.chunk, r.chunkOff, ch.err)
		}
		return io.EOF
	}
	r.pos = 0
	r.inChunk = true
	r.base = eventBase{}
	return nil
}

// chunk is one chunk as fetch read it: its decompressed payload, or the
// error that ends the stream there (io.EOF at a clean end; with kind, a
// damage).
type chunk struct {
	off, end      int64 // file offsets of its header and of what follows it
	comp, payload []byte
	events        []decodedEvent // with ReadAhead, its first events
	kind          CorruptKind
	err           error
}

// fetch reads, checks and decompresses the chunk at file offset off,
// reusing the buffers comp and payload.
func fetch(rd io.Reader, off int64, comp, payload []byte) chunk {
	ch := chunk{off: off, end: off, comp: comp[:0], payload: payload[:0]}
	fail := func(kind CorruptKind, err error) chunk {
		ch.kind, ch.err = kind, err
		return ch
	}
	var hdr [chunkHeaderSize]byte
	n, err := io.ReadFull(rd, hdr[:])
	ch.end += int64(n)
	switch {
	case err == io.EOF:
		return fail(0, io.EOF)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fail(Truncated, fmt.Errorf("file ends after %d of %d chunk header bytes", n, chunkHeaderSize))
	case err != nil:
		return fail(0, err)
	}
	size := binary.LittleEndian.Uint32(hdr[0:])
	sum := binary.LittleEndian.Uint32(hdr[4:])
	if size == 0 || size > MaxChunkPayload {
		return fail(BadChunkLength, fmt.Errorf("payload length %d not in [1, %d]", size, MaxChunkPayload))
	}
	ch.comp, err = readN(rd, ch.comp, int(size))
	ch.end += int64(len(ch.comp))
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fail(Truncated, fmt.Errorf("file ends after %d of %d payload bytes", len(ch.comp), size))
		}
		return fail(0, err)
	}
	if got := crc32.Checksum(ch.comp, castagnoli); got != sum {
		return fail(CRCMismatch, fmt.Errorf("stored CRC-32C %#08x, computed %#08x", sum, got))
	}
	dec, _ := zstdDecoder()
	ch.payload, err = dec.DecodeAll(ch.comp, ch.payload)
	if err != nil {
		ch.payload = ch.payload[:0]
		return fail(BadZstd, err)
	}
	return ch
}

// ReadAhead makes the Reader read and decompress chunks, and decode their
// events, on another goroutine while the caller works on the records:
// loading a large capture then takes the time of the slower of the two
// instead of their sum. Close stops that goroutine. It must be called
// before the first Next.
func (r *Reader) ReadAhead() {
	// One chunk waits while the next is read: with the one being decoded,
	// three payloads of at most MaxChunkPayload (real chunks: ~1 MiB).
	const depth = 1
	r.ahead = make(chan chunk, depth)
	r.spare = make(chan chunk, depth+2)
	r.stop = make(chan struct{})
	go func(rd io.Reader, off int64, version uint32) {
		defer close(r.ahead)
		var comp []byte
		for {
			var spare chunk
			select {
			case spare = <-r.spare:
			default:
			}
			ch := fetch(rd, off, comp, spare.payload)
			comp, off = ch.comp, ch.end
			ch.comp = nil
			if ch.err == nil {
				if spare.events == nil { // at full size at once: a buffer grown by appends leaves garbage
					spare.events = make([]decodedEvent, 0, maxDecodedEvents)
				}
				ch.events = decodeEvents(ch.payload, version, spare.events)
			}
			select {
			case r.ahead <- ch:
			case <-r.stop:
				return
			}
			if ch.err != nil {
				return
			}
		}
	}(r.r, r.off, r.version)
}

// Close stops reading ahead (ReadAhead); the Reader must not be used after
// it. It is a no-op for a Reader that does not read ahead.
func (r *Reader) Close() {
	if r.stop != nil {
		close(r.stop)
		for range r.ahead { // wait until the goroutine no longer reads r.r
		}
		r.stop = nil
	}
}

// readN appends exactly n bytes from r to buf. It grows buf as data
// arrives rather than up front, so a corrupt length on a short file costs
// no more memory than the file holds.
func readN(r io.Reader, buf []byte, n int) ([]byte, error) {
	const step = 1 << 20
	for len(buf) < n {
		k := min(n-len(buf), step)
		buf = slices.Grow(buf, k)
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

func (r *Reader) corrupt(kind CorruptKind, err error) *CorruptError {
	return &CorruptError{
		Offset:     r.chunkOff,
		Chunk:      r.chunk,
		Kind:       kind,
		ChunksRead: r.chunksRead,
		Err:        err,
	}
}
