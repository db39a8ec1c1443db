package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// The file format is defined in docs/capture-format.md; this file is its
// implementation and must change together with it.

// Magic is the first 8 bytes of every capture file.
const Magic = "HEAPLENS"

// Version is the capture format version this package writes and the newest it
// reads. Adding a record type or appending fields to a record body does not
// change it (see docs/capture-format.md, "Versioning").
//
// Version 2 writes the time and address of Alloc and Free records relative to
// the chunk's previous Alloc or Free (eventBase); version 1 wrote them whole.
const Version uint32 = 2

// eventBase is what an Alloc or Free record's time and address are written
// relative to, from version 2 on: the previous Alloc or Free of the chunk,
// zero at a chunk's start. Consecutive events are close in time and often
// in address, so their deltas take 1-3 bytes where the values take 6-9: at
// --rate 1 the records are half as long and compress twice as fast.
type eventBase struct {
	time int64
	addr uint64
}

// put appends t and addr relative to the base and moves the base to them.
func (e *eventBase) put(b []byte, t int64, addr uint64) []byte {
	b = binary.AppendVarint(b, t-e.time)
	b = binary.AppendVarint(b, int64(addr-e.addr))
	e.time, e.addr = t, addr
	return b
}

// get reads what put wrote.
func (e *eventBase) get(d *decoder) (int64, uint64) {
	dt := d.varint()
	return e.next(dt, d.varint())
}

// next moves the base on by the deltas put wrote and returns the event's
// time and address. Deltas wrap, so every value round-trips.
func (e *eventBase) next(dt, daddr int64) (int64, uint64) {
	e.time += dt
	e.addr += uint64(daddr)
	return e.time, e.addr
}

// HeaderSize is the size of the file header: magic, u32 version, u32 flags.
const HeaderSize = 16

// chunkHeaderSize is the size of a chunk's framing: u32 length, u32 CRC-32C.
const chunkHeaderSize = 8

// Limits that keep a corrupt file from causing absurd allocations.
const (
	// MaxChunkPayload bounds a chunk's compressed and decompressed size.
	MaxChunkPayload = 64 << 20
	// MaxRecordBody bounds one record body.
	MaxRecordBody = 16 << 20
	// chunkTarget is the uncompressed size at which the writer starts a
	// new chunk: big enough for zstd to find redundancy across thousands of
	// records, small enough that a damaged chunk loses little.
	chunkTarget = 1 << 20
)

// RecordType identifies a record inside a chunk payload.
type RecordType uint8

// Record types. Values are part of the file format and never reused; 0 is
// reserved. Readers skip types they do not know.
const (
	RecMeta     RecordType = 1
	RecProcess  RecordType = 2
	RecMapping  RecordType = 3
	RecLocation RecordType = 4
	RecStack    RecordType = 5
	RecAlloc    RecordType = 6
	RecFree     RecordType = 7
	RecEnd      RecordType = 8
	RecRSS      RecordType = 9
	RecOrigin   RecordType = 10
	RecNote     RecordType = 11
	RecMark     RecordType = 12
	RecMalloc   RecordType = 13
	RecResident RecordType = 14
)

var recordNames = map[RecordType]string{
	RecMeta: "Meta", RecProcess: "Process", RecMapping: "Mapping",
	RecLocation: "Location", RecStack: "Stack", RecAlloc: "Alloc",
	RecFree: "Free", RecEnd: "End", RecRSS: "RSS", RecOrigin: "Origin", RecNote: "Note", RecMark: "Mark", RecMalloc: "Malloc", RecResident: "Resident",
}

// String returns the record type's name, or "type(N)" for unknown types.
func (t RecordType) String() string {
	if s, ok := recordNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// End record flag bits.
const (
	endSignaled = 1 << iota
	endKnown
	endExec
	endDetached
)

// Body encoders. Each appends one record body to b in the field order of
// docs/capture-format.md. None allocates when b has room.

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func appendMeta(b []byte, m *Meta) []byte {
	v := m.FormatVersion
	if v == 0 {
		v = Version
	}
	b = binary.AppendUvarint(b, uint64(v))
	b = appendString(b, m.HeaplensVersion)
	b = binary.AppendUvarint(b, m.Rate)
	b = binary.AppendVarint(b, m.StartUnixNano)
	b = appendStrings(b, m.Command)
	b = appendString(b, m.Host)
	if m.AttachedPID != 0 {
		b = binary.AppendVarint(b, int64(m.AttachedPID))
		if m.AttachedHostPID != 0 {
			b = binary.AppendVarint(b, int64(m.AttachedHostPID))
		}
	}
	return b
}

func appendProcess(b []byte, p *Process) []byte {
	b = binary.AppendUvarint(b, uint64(p.Stream))
	b = binary.AppendVarint(b, int64(p.PID))
	b = binary.AppendVarint(b, int64(p.PPID))
	b = binary.AppendVarint(b, p.StartMonoNano)
	b = binary.AppendVarint(b, p.StartUnixNano)
	b = appendStrings(b, p.Cmdline)
	b = appendString(b, p.Exe)
	b = appendString(b, p.Python)
	b = appendString(b, p.PythonNote)
	if p.Allocator != "" {
		b = appendString(b, p.Allocator)
	}
	return b
}

func appendMapping(b []byte, m *Mapping) []byte {
	b = binary.AppendUvarint(b, m.ID)
	b = binary.AppendUvarint(b, uint64(m.Stream))
	b = binary.AppendUvarint(b, m.Start)
	b = binary.AppendUvarint(b, m.Limit)
	b = binary.AppendUvarint(b, m.Offset)
	b = binary.AppendUvarint(b, m.LoadBias)
	b = appendString(b, m.File)
	b = appendString(b, m.BuildID)
	return binary.AppendVarint(b, m.TimeNano)
}

func appendLocation(b []byte, l *Location) []byte {
	b = binary.AppendUvarint(b, l.ID)
	b = binary.AppendUvarint(b, l.MappingID)
	b = binary.AppendUvarint(b, l.Address)
	b = binary.AppendUvarint(b, uint64(len(l.Lines)))
	for i := range l.Lines {
		ln := &l.Lines[i]
		b = appendString(b, ln.Function)
		b = appendString(b, ln.File)
		b = binary.AppendVarint(b, int64(ln.Line))
	}
	if l.Kind == KindNative {
		return b // the common case stays short
	}
	b = binary.AppendUvarint(b, uint64(l.Kind))
	return binary.AppendUvarint(b, uint64(l.Method))
}

func appendStack(b []byte, s *Stack) []byte {
	b = binary.AppendUvarint(b, s.ID)
	b = binary.AppendUvarint(b, uint64(len(s.Locations)))
	for _, id := range s.Locations {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

func appendAlloc(b []byte, a *Alloc, base *eventBase) []byte {
	b = binary.AppendUvarint(b, uint64(a.Stream))
	b = binary.AppendUvarint(b, uint64(a.TID))
	b = base.put(b, a.TimeNano, a.Addr)
	b = binary.AppendUvarint(b, a.Size)
	b = binary.AppendUvarint(b, a.StackID)
	b = binary.AppendUvarint(b, uint64(a.Func))
	if a.Origin == 0 && a.Method == 0 {
		return b // the common case stays short
	}
	b = binary.AppendUvarint(b, a.Origin)
	return binary.AppendUvarint(b, uint64(a.Method))
}

func appendOrigin(b []byte, o *Origin) []byte {
	b = binary.AppendUvarint(b, uint64(o.Stream))
	b = binary.AppendUvarint(b, o.Token)
	b = binary.AppendUvarint(b, uint64(o.TID))
	b = binary.AppendVarint(b, o.TimeNano)
	return binary.AppendUvarint(b, o.StackID)
}

func appendResident(b []byte, r *Resident) []byte {
	b = binary.AppendUvarint(b, uint64(r.Stream))
	b = binary.AppendVarint(b, r.TimeNano)
	b = binary.AppendUvarint(b, r.Addr)
	b = binary.AppendUvarint(b, r.Size)
	return binary.AppendUvarint(b, r.Resident)
}

func appendMalloc(b []byte, m *Malloc) []byte {
	b = binary.AppendUvarint(b, uint64(m.Stream))
	b = binary.AppendVarint(b, m.TimeNano)
	b = binary.AppendUvarint(b, m.Arena)
	b = binary.AppendUvarint(b, m.Mmapped)
	b = binary.AppendUvarint(b, m.InUse)
	b = binary.AppendUvarint(b, m.Free)
	return binary.AppendUvarint(b, m.Keep)
}

func appendMark(b []byte, m *Mark) []byte {
	b = binary.AppendUvarint(b, uint64(m.Stream))
	b = binary.AppendVarint(b, m.TimeNano)
	return binary.AppendUvarint(b, m.Value)
}

func appendNote(b []byte, n *Note) []byte {
	b = binary.AppendUvarint(b, uint64(n.Stream))
	return appendString(b, n.Text)
}

func appendFree(b []byte, f *Free, base *eventBase) []byte {
	b = binary.AppendUvarint(b, uint64(f.Stream))
	b = binary.AppendUvarint(b, uint64(f.TID))
	return base.put(b, f.TimeNano, f.Addr)
}

func appendEnd(b []byte, e *End) []byte {
	b = binary.AppendUvarint(b, uint64(e.Stream))
	b = binary.AppendVarint(b, e.TimeNano)
	b = binary.AppendVarint(b, int64(e.ExitCode))
	b = binary.AppendVarint(b, int64(e.Signal))
	var flags uint64
	if e.Signaled {
		flags |= endSignaled
	}
	if e.Known {
		flags |= endKnown
	}
	if e.Exec {
		flags |= endExec
	}
	if e.Detached {
		flags |= endDetached
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, e.DroppedAllocs)
	b = binary.AppendUvarint(b, e.DroppedFrees)
	b = binary.AppendUvarint(b, e.LostBytes)
	if e.HighWater != 0 || e.MaxRSS != 0 || e.Finished != 0 || e.Ring != 0 { // appended later, optional: older readers skip it
		b = binary.AppendUvarint(b, e.HighWater)
		b = binary.AppendUvarint(b, e.MaxRSS)
		b = binary.AppendVarint(b, e.Finished)
		b = binary.AppendUvarint(b, e.Ring)
	}
	return b
}

func appendRSS(b []byte, r *RSS) []byte {
	b = binary.AppendUvarint(b, uint64(r.Stream))
	b = binary.AppendVarint(b, r.TimeNano)
	b = binary.AppendUvarint(b, r.Bytes)
	if r.HighWater != 0 { // appended later, optional: older readers skip it
		b = binary.AppendUvarint(b, r.HighWater)
	}
	return b
}

// errShort and friends describe why a body failed to decode.
var (
	errShort    = errors.New("body too short")
	errVarint   = errors.New("malformed varint")
	errRange    = errors.New("value out of range")
	errCount    = errors.New("count exceeds remaining bytes")
	errZeroID   = errors.New("ID 0 is reserved")
	errBodySize = errors.New("body length exceeds limit or remaining payload")
)

// decoder reads fields from one record body. The first error sticks and
// every later read returns zero, so decode functions check once at the end.
// Trailing bytes after the known fields are ignored: they are fields appended
// by a newer writer.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		if n == 0 {
			d.fail(errShort)
		} else {
			d.fail(errVarint)
		}
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		if n == 0 {
			d.fail(errShort)
		} else {
			d.fail(errVarint)
		}
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail(errRange)
		return 0
	}
	return uint32(v)
}

func (d *decoder) u8() uint8 {
	v := d.uvarint()
	if v > math.MaxUint8 {
		d.fail(errRange)
		return 0
	}
	return uint8(v)
}

func (d *decoder) int() int {
	v := d.varint()
	if int64(int(v)) != v {
		d.fail(errRange)
		return 0
	}
	return int(v)
}

// count reads an element count and rejects counts that could not fit in the
// remaining bytes given each element takes at least minSize bytes, so a
// corrupt count never drives a large allocation.
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/minSize) {
		d.fail(errCount)
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) strings() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	return ss
}

func (d *decoder) id() uint64 {
	v := d.uvarint()
	if v == 0 && d.err == nil {
		d.fail(errZeroID)
	}
	return v
}

func decodeMeta(b []byte, m *Meta) error {
	d := decoder{b: b}
	m.FormatVersion = d.u32()
	m.HeaplensVersion = d.string()
	m.Rate = d.uvarint()
	m.StartUnixNano = d.varint()
	m.Command = d.strings()
	m.Host = d.string()
	if len(d.b) > 0 { // heaplens attach
		m.AttachedPID = d.int()
		if len(d.b) > 0 { // in another PID namespace
			m.AttachedHostPID = d.int()
		}
	}
	return d.err
}

func decodeProcess(b []byte, p *Process) error {
	d := decoder{b: b}
	p.Stream = d.u32()
	p.PID = d.int()
	p.PPID = d.int()
	p.StartMonoNano = d.varint()
	p.StartUnixNano = d.varint()
	p.Cmdline = d.strings()
	p.Exe = d.string()
	if len(d.b) > 0 { // appended in heaplens 0.2
		p.Python = d.string()
		p.PythonNote = d.string()
	}
	if len(d.b) > 0 { // appended in heaplens 0.3
		p.Allocator = d.string()
	}
	return d.err
}

func decodeMapping(b []byte, m *Mapping) error {
	d := decoder{b: b}
	m.ID = d.id()
	m.Stream = d.u32()
	m.Start = d.uvarint()
	m.Limit = d.uvarint()
	m.Offset = d.uvarint()
	m.LoadBias = d.uvarint()
	m.File = d.string()
	m.BuildID = d.string()
	m.TimeNano = d.varint()
	return d.err
}

func decodeLocation(b []byte, l *Location) error {
	d := decoder{b: b}
	l.ID = d.id()
	l.MappingID = d.uvarint()
	l.Address = d.uvarint()
	if n := d.count(3); n > 0 { // a line is at least 3 bytes
		l.Lines = make([]Line, n)
		for i := range l.Lines {
			ln := &l.Lines[i]
			ln.Function = d.string()
			ln.File = d.string()
			ln.Line = d.int()
		}
	}
	l.Kind, l.Method = KindNative, 0
	if len(d.b) == 0 {
		l.Kind = legacyKind(l)
		return d.err
	}
	l.Kind = Kind(d.u8())
	l.Method = d.u8()
	if d.err == nil && l.Kind >= numKinds {
		return fmt.Errorf("unknown location kind %d", l.Kind)
	}
	return d.err
}

// legacyKind is the kind of a location written before kinds were (the
// appended field is absent): a Python frame was told by having no mapping
// and a first line whose file is a .py file or a "<...>" pseudo-file such
// as "<string>". Pool frames were never written.
func legacyKind(l *Location) Kind {
	if l.MappingID != 0 || len(l.Lines) == 0 {
		return KindNative
	}
	f := l.Lines[0].File
	if strings.HasSuffix(f, ".py") || strings.HasPrefix(f, "<") && strings.HasSuffix(f, ">") {
		return KindPython
	}
	return KindNative
}

func decodeStack(b []byte, s *Stack) error {
	d := decoder{b: b}
	s.ID = d.id()
	if n := d.count(1); n > 0 {
		s.Locations = make([]uint64, n)
		for i := range s.Locations {
			s.Locations[i] = d.uvarint()
		}
	}
	return d.err
}

// decodeAlloc and decodeFree read the time and address relative to base
// (version 2), or whole when base is nil (version 1).
func decodeAlloc(b []byte, a *Alloc, base *eventBase) error {
	d := decoder{b: b}
	a.Stream = d.u32()
	a.TID = d.u32()
	a.TimeNano, a.Addr = eventAt(&d, base)
	a.Size = d.uvarint()
	a.StackID = d.uvarint()
	a.Func = d.u8()
	a.Origin, a.Method = 0, 0
	if len(d.b) > 0 { // appended for thread pools
		a.Origin = d.uvarint()
		a.Method = d.u8()
	}
	return d.err
}

func decodeOrigin(b []byte, o *Origin) error {
	d := decoder{b: b}
	o.Stream = d.u32()
	o.Token = d.uvarint()
	o.TID = d.u32()
	o.TimeNano = d.varint()
	o.StackID = d.uvarint()
	return d.err
}

func decodeResident(b []byte, r *Resident) error {
	d := decoder{b: b}
	r.Stream = d.u32()
	r.TimeNano = d.varint()
	r.Addr = d.uvarint()
	r.Size = d.uvarint()
	r.Resident = d.uvarint()
	return d.err
}

func decodeMalloc(b []byte, m *Malloc) error {
	d := decoder{b: b}
	m.Stream = d.u32()
	m.TimeNano = d.varint()
	m.Arena = d.uvarint()
	m.Mmapped = d.uvarint()
	m.InUse = d.uvarint()
	m.Free = d.uvarint()
	m.Keep = d.uvarint()
	return d.err
}

func decodeMark(b []byte, m *Mark) error {
	d := decoder{b: b}
	m.Stream = d.u32()
	m.TimeNano = d.varint()
	m.Value = d.uvarint()
	return d.err
}

func decodeFree(b []byte, f *Free, base *eventBase) error {
	d := decoder{b: b}
	f.Stream = d.u32()
	f.TID = d.u32()
	f.TimeNano, f.Addr = eventAt(&d, base)
	return d.err
}

// eventAt reads an event's time and address, relative to base unless it is nil.
func eventAt(d *decoder, base *eventBase) (int64, uint64) {
	if base == nil {
		return d.varint(), d.uvarint()
	}
	return base.get(d)
}

func decodeEnd(b []byte, e *End) error {
	d := decoder{b: b}
	e.Stream = d.u32()
	e.TimeNano = d.varint()
	e.ExitCode = d.int()
	e.Signal = d.int()
	flags := d.uvarint()
	e.Signaled = flags&endSignaled != 0
	e.Known = flags&endKnown != 0
	e.Exec = flags&endExec != 0
	e.Detached = flags&endDetached != 0
	e.DroppedAllocs = d.uvarint()
	e.DroppedFrees = d.uvarint()
	e.LostBytes = d.uvarint()
	if len(d.b) > 0 { // appended later (high-water marks)
		e.HighWater = d.uvarint()
		e.MaxRSS = d.uvarint()
	}
	if len(d.b) > 0 {
		e.Finished = d.varint()
	}
	if len(d.b) > 0 {
		e.Ring = d.uvarint()
	}
	return d.err
}

func decodeNote(b []byte, n *Note) error {
	d := decoder{b: b}
	n.Stream = d.u32()
	n.Text = d.string()
	return d.err
}

func decodeRSS(b []byte, r *RSS) error {
	d := decoder{b: b}
	r.Stream = d.u32()
	r.TimeNano = d.varint()
	r.Bytes = d.uvarint()
	if len(d.b) > 0 { // appended later (high-water marks)
		r.HighWater = d.uvarint()
	}
	return d.err
}
