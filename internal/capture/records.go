package capture

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// A body is the fields of one record type: code lists them in body order
// (docs/capture-format.md), for the Writer and the Reader alike, and dump
// shows them, one line, for Dump.
type body interface {
	code(c *codec)
	dump() string
}

// recordTypes declares every record type once: its name, its body in a
// Record, and how a Capture keeps it. Writing, reading, loading and
// dumping follow from it; docs_test.go holds the docs to it.
var recordTypes = [...]struct {
	name string
	body func(r *Record) body          // r's field of this type; a pointer field is allocated if nil
	keep func(a *assembler, r *Record) // how Load puts it in a Capture
}{
	RecMeta:    {"Meta", func(r *Record) body { return field(&r.Meta) }, (*assembler).meta},
	RecProcess: {"Process", func(r *Record) body { return field(&r.Process) }, (*assembler).process},
	RecMapping: {"Mapping", func(r *Record) body { return field(&r.Mapping) }, func(a *assembler, r *Record) {
		putOnce(a.c, a.c.Mappings, r.Mapping.ID, r.Mapping)
	}},
	RecLocation: {"Location", func(r *Record) body { return field(&r.Location) }, func(a *assembler, r *Record) {
		putOnce(a.c, a.c.Locations, r.Location.ID, r.Location)
	}},
	RecStack: {"Stack", func(r *Record) body { return field(&r.Stack) }, (*assembler).stack},
	RecAlloc: {"Alloc", func(r *Record) body { return &r.Alloc }, func(a *assembler, r *Record) {
		a.c.Allocs = append(a.c.Allocs, r.Alloc)
	}},
	RecFree: {"Free", func(r *Record) body { return &r.Free }, func(a *assembler, r *Record) {
		a.c.Frees = append(a.c.Frees, r.Free)
		a.c.FreeOrder = append(a.c.FreeOrder, int32(len(a.c.Allocs))) // < MaxEvents: checked by add
	}},
	RecEnd: {"End", func(r *Record) body { return field(&r.End) }, func(a *assembler, r *Record) {
		putOnce(a.c, a.c.Ends, r.End.Stream, r.End)
	}},
	RecRSS: {"RSS", func(r *Record) body { return &r.RSS }, func(a *assembler, r *Record) {
		a.c.RSS = append(a.c.RSS, r.RSS)
	}},
	RecOrigin: {"Origin", func(r *Record) body { return &r.Origin }, func(a *assembler, r *Record) {
		a.c.Origins = append(a.c.Origins, r.Origin)
	}},
	RecNote: {"Note", func(r *Record) body { return field(&r.Note) }, func(a *assembler, r *Record) {
		a.c.Notes = append(a.c.Notes, r.Note)
	}},
	RecMark: {"Mark", func(r *Record) body { return &r.Mark }, func(a *assembler, r *Record) {
		a.c.Marks = append(a.c.Marks, r.Mark)
	}},
	RecMalloc: {"Malloc", func(r *Record) body { return &r.Malloc }, func(a *assembler, r *Record) {
		a.c.Mallocs = append(a.c.Mallocs, r.Malloc)
	}},
	RecResident: {"Resident", func(r *Record) body { return &r.Resident }, func(a *assembler, r *Record) {
		a.c.Residents = append(a.c.Residents, r.Resident)
	}},
}

// field returns the record a pointer field of Record points to, allocating
// it for a record being decoded.
func field[T any](p **T) *T {
	if *p == nil {
		*p = new(T)
	}
	return *p
}

// known says whether t is a record type this package reads.
func (t RecordType) known() bool { return int(t) < len(recordTypes) && recordTypes[t].name != "" }

// body returns the record's fields, those of its Type, which must be known.
func (r *Record) body() body { return recordTypes[r.Type].body(r) }

func (m *Meta) code(c *codec) {
	v := m.FormatVersion
	if v == 0 && !c.dec {
		v = Version // the header's
	}
	unsigned(c, &v)
	if c.dec {
		m.FormatVersion = v
	}
	c.string(&m.HeaplensVersion)
	unsigned(c, &m.Rate)
	signed(c, &m.StartUnixNano)
	slice(c, &m.Command, 1, (*codec).string)
	c.string(&m.Host)
	if c.more(m.AttachedPID != 0) { // heaplens attach
		signed(c, &m.AttachedPID)
		if c.more(m.AttachedHostPID != 0) { // in another PID namespace
			signed(c, &m.AttachedHostPID)
		}
	}
}

func (m *Meta) dump() string {
	return fmt.Sprintf("version=%d heaplens=%s rate=%d start_unix_ns=%d host=%s command=%s",
		m.FormatVersion, q(m.HeaplensVersion), m.Rate, m.StartUnixNano, q(m.Host), list(m.Command))
}

func (p *Process) code(c *codec) {
	unsigned(c, &p.Stream)
	signed(c, &p.PID)
	signed(c, &p.PPID)
	signed(c, &p.StartMonoNano)
	signed(c, &p.StartUnixNano)
	slice(c, &p.Cmdline, 1, (*codec).string)
	c.string(&p.Exe)
	if c.more(true) { // appended in heaplens 0.2
		c.string(&p.Python)
		c.string(&p.PythonNote)
	}
	if c.more(p.Allocator != "") { // appended in heaplens 0.3
		c.string(&p.Allocator)
	}
}

func (p *Process) dump() string {
	return fmt.Sprintf("stream=%d pid=%d ppid=%d start_mono_ns=%d exe=%s python=%s note=%s allocator=%s cmdline=%s",
		p.Stream, p.PID, p.PPID, p.StartMonoNano, q(p.Exe), q(p.Python), q(p.PythonNote), q(p.Allocator), list(p.Cmdline))
}

func (m *Mapping) code(c *codec) {
	c.id(&m.ID)
	unsigned(c, &m.Stream)
	unsigned(c, &m.Start)
	unsigned(c, &m.Limit)
	unsigned(c, &m.Offset)
	unsigned(c, &m.LoadBias)
	c.name(&m.File)
	c.string(&m.BuildID)
	signed(c, &m.TimeNano)
}

func (m *Mapping) dump() string {
	return fmt.Sprintf("id=%d stream=%d [%#x,%#x) offset=%#x bias=%#x build_id=%s file=%s",
		m.ID, m.Stream, m.Start, m.Limit, m.Offset, m.LoadBias, m.BuildID, q(m.File))
}

func (l *Location) code(c *codec) {
	c.id(&l.ID)
	unsigned(c, &l.MappingID)
	unsigned(c, &l.Address)
	slice(c, &l.Lines, 3, func(c *codec, ln *Line) { // a line is at least 3 bytes
		c.name(&ln.Function)
		c.name(&ln.File)
		signed(c, &ln.Line)
	})
	switch {
	case c.more(l.Kind != KindNative): // the common case stays short
		unsigned(c, &l.Kind)
		unsigned(c, &l.Method)
		if l.Kind >= numKinds {
			c.fail(fmt.Errorf("unknown location kind %d", l.Kind))
		}
	case c.dec:
		l.Kind = legacyKind(l)
	}
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

func (l *Location) dump() string {
	lines := make([]string, len(l.Lines))
	for i, ln := range l.Lines {
		lines[i] = fmt.Sprintf("%s %s:%d", q(ln.Function), q(ln.File), ln.Line)
	}
	return fmt.Sprintf("id=%d kind=%s mapping=%d address=%#x lines=[%s]", l.ID, l.Kind, l.MappingID, l.Address, strings.Join(lines, "; "))
}

func (s *Stack) code(c *codec) {
	c.id(&s.ID)
	if c.dec {
		slice(c, &s.Locations, 1, unsigned[uint64])
		if c.more(false) { // a parent (version 3)
			unsigned(c, &s.Parent)
			unsigned(c, &s.Skip)
			if s.Parent == 0 { // none: nothing to skip
				s.Skip = 0
			}
		}
		return
	}
	own := len(s.Locations) - int(s.Inherited)
	if own < 0 || s.Inherited < 0 || s.Inherited > 0 && s.Parent == 0 {
		c.fail(fmt.Errorf("stack %d inherits %d of its %d locations from parent %d", s.ID, s.Inherited, len(s.Locations), s.Parent))
		return
	}
	// What slice writes, in a loop rather than a call per Location.
	c.b = binary.AppendUvarint(c.b, uint64(own))
	for _, id := range s.Locations[:own] {
		c.b = binary.AppendUvarint(c.b, id)
	}
	if s.Parent != 0 {
		c.b = binary.AppendUvarint(c.b, s.Parent)
		c.b = binary.AppendUvarint(c.b, uint64(s.Skip))
	}
}

func (s *Stack) dump() string {
	ids := make([]string, len(s.Locations))
	for i, id := range s.Locations {
		ids[i] = strconv.FormatUint(id, 10)
	}
	parent := ""
	if s.Parent != 0 {
		parent = fmt.Sprintf(" parent=%d skip=%d", s.Parent, s.Skip)
	}
	return fmt.Sprintf("id=%d locations=[%s]%s", s.ID, strings.Join(ids, " "), parent)
}

func (a *Alloc) code(c *codec) {
	unsigned(c, &a.Stream)
	unsigned(c, &a.TID)
	c.event(&a.TimeNano, &a.Addr)
	unsigned(c, &a.Size)
	unsigned(c, &a.StackID)
	unsigned(c, &a.Func)
	if c.more(a.Origin != 0 || a.Method != 0) { // appended for thread pools; the common case stays short
		unsigned(c, &a.Origin)
		unsigned(c, &a.Method)
	}
}

func (a *Alloc) dump() string {
	s := fmt.Sprintf("stream=%d tid=%d t=%d addr=%#x size=%d stack=%d func=%s",
		a.Stream, a.TID, a.TimeNano, a.Addr, a.Size, a.StackID, funcName(a.Func))
	if a.Origin != 0 || a.Method != 0 {
		s += fmt.Sprintf(" origin=%#x method=%s", a.Origin, MethodNames[a.Method])
	}
	return s
}

func (f *Free) code(c *codec) {
	unsigned(c, &f.Stream)
	unsigned(c, &f.TID)
	c.event(&f.TimeNano, &f.Addr)
}

func (f *Free) dump() string {
	return fmt.Sprintf("stream=%d tid=%d t=%d addr=%#x", f.Stream, f.TID, f.TimeNano, f.Addr)
}

func (e *End) code(c *codec) {
	unsigned(c, &e.Stream)
	signed(c, &e.TimeNano)
	signed(c, &e.ExitCode)
	signed(c, &e.Signal)
	c.flags(&e.Signaled, &e.Known, &e.Exec, &e.Detached)
	unsigned(c, &e.DroppedAllocs)
	unsigned(c, &e.DroppedFrees)
	unsigned(c, &e.LostBytes)
	if c.more(e.HighWater != 0 || e.MaxRSS != 0 || e.Finished != 0 || e.Ring != 0) { // appended later, optional
		unsigned(c, &e.HighWater)
		unsigned(c, &e.MaxRSS)
		if c.more(true) {
			signed(c, &e.Finished)
		}
		if c.more(true) {
			unsigned(c, &e.Ring)
		}
	}
}

func (e *End) dump() string {
	return fmt.Sprintf("stream=%d t=%d known=%v exit=%d signaled=%v signal=%d exec=%v dropped_allocs=%d dropped_frees=%d lost_bytes=%d high_water=%d max_rss=%d finished=%d ring=%d",
		e.Stream, e.TimeNano, e.Known, e.ExitCode, e.Signaled, e.Signal, e.Exec, e.DroppedAllocs, e.DroppedFrees, e.LostBytes, e.HighWater, e.MaxRSS, e.Finished, e.Ring)
}

func (r *RSS) code(c *codec) {
	unsigned(c, &r.Stream)
	signed(c, &r.TimeNano)
	unsigned(c, &r.Bytes)
	if c.more(r.HighWater != 0) { // appended later, optional
		unsigned(c, &r.HighWater)
	}
}

func (r *RSS) dump() string {
	return fmt.Sprintf("stream=%d t=%d bytes=%d high_water=%d", r.Stream, r.TimeNano, r.Bytes, r.HighWater)
}

func (o *Origin) code(c *codec) {
	unsigned(c, &o.Stream)
	unsigned(c, &o.Token)
	unsigned(c, &o.TID)
	signed(c, &o.TimeNano)
	unsigned(c, &o.StackID)
}

func (o *Origin) dump() string {
	return fmt.Sprintf("stream=%d token=%#x tid=%d t=%d stack=%d", o.Stream, o.Token, o.TID, o.TimeNano, o.StackID)
}

func (n *Note) code(c *codec) {
	unsigned(c, &n.Stream)
	c.string(&n.Text)
}

func (n *Note) dump() string { return fmt.Sprintf("stream=%d %s", n.Stream, q(n.Text)) }

func (m *Mark) code(c *codec) {
	unsigned(c, &m.Stream)
	signed(c, &m.TimeNano)
	unsigned(c, &m.Value)
}

func (m *Mark) dump() string {
	return fmt.Sprintf("stream=%d t=%d value=%d", m.Stream, m.TimeNano, m.Value)
}

func (m *Malloc) code(c *codec) {
	unsigned(c, &m.Stream)
	signed(c, &m.TimeNano)
	unsigned(c, &m.Arena)
	unsigned(c, &m.Mmapped)
	unsigned(c, &m.InUse)
	unsigned(c, &m.Free)
	unsigned(c, &m.Keep)
}

func (m *Malloc) dump() string {
	return fmt.Sprintf("stream=%d t=%d arena=%d mmapped=%d in_use=%d free=%d keep=%d", m.Stream, m.TimeNano, m.Arena, m.Mmapped, m.InUse, m.Free, m.Keep)
}

func (r *Resident) code(c *codec) {
	unsigned(c, &r.Stream)
	signed(c, &r.TimeNano)
	unsigned(c, &r.Addr)
	unsigned(c, &r.Size)
	unsigned(c, &r.Resident)
}

func (r *Resident) dump() string {
	return fmt.Sprintf("stream=%d t=%d addr=%#x size=%d resident=%d", r.Stream, r.TimeNano, r.Addr, r.Size, r.Resident)
}

var q = strconv.Quote

// list shows strings quoted, in brackets.
func list(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// funcName names a hooked function, or its number when unknown.
func funcName(f uint8) string {
	if n, ok := FuncNames[f]; ok {
		return n
	}
	return strconv.Itoa(int(f))
}
