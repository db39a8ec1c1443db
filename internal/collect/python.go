package collect

import (
	"fmt"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/pyframe"
	"github.com/heaplens/heaplens/internal/ring"
	"github.com/heaplens/heaplens/internal/stack"
	"github.com/heaplens/heaplens/internal/unwind"
)

// pyStream is what a stream knows about its Python interpreter.
type pyStream struct {
	eval   uint64              // _PyEval_EvalFrameDefault; its module is the interpreter
	interp *module             // found once the modules are known
	codes  map[codeKey]*pyCode // CODE records received
	locs   map[pyLocKey]uint64 // Python frame -> Location ID
	// at maps a frame of known code to its Location ID: each line has
	// several positions, each looked up in the code's table once.
	at  map[pyPosKey]uint64
	ids []uint64 // mergePython's scratch: a sample's Python Locations
	// runs are the latest samples' Python frames and their Locations (0:
	// of unknown code), whose outer ones the next reuses.
	runs    recent[ring.PyFrame]
	unknown []int      // mergePython's scratch: the frames whose code is not known
	acts    [][]uint64 // and its activations, slices of ids
	// parts are the interpreter's eval code outside its named function
	// (evalParts), known once partsKnown.
	parts      []unwind.Range
	partsKnown bool
}

type pyPosKey struct {
	code codeKey
	pos  int64
}

// maxPyPositions bounds pyStream.at: a ring that names endless positions
// starts it over.
const maxPyPositions = 1 << 20

type codeKey struct {
	addr     uint64
	identity uint32
}

type pyCode struct {
	file, name string
	table      *pyframe.Table
}

type pyLocKey struct {
	code codeKey
	line int
}

// python describes the stream's interpreter for its Process record.
func pythonInfo(p ring.Python) (version, note string) {
	if p.Version != 0 {
		version = fmt.Sprintf("%d.%d.%d", p.Version>>24, p.Version>>16&0xff, p.Version>>8&0xff)
	}
	// Without frames the PyMem hooks are not installed either, nor is the
	// start of the interpreter's shutdown marked: say all three, as the
	// small objects vanish from every view and leaks mean something else.
	const off = "Python frames are unavailable and Python objects of 512 bytes or less are not sampled"
	const leaks = "native frames only, and leaks are what outlived the interpreter's shutdown"
	switch p.Status {
	case ring.PyUnsupported:
		note = fmt.Sprintf("%s: Python %s is not supported (heaplens reads CPython %s, default builds); %s", off, version, supportedPythons, leaks)
	case ring.PyFreeThreaded:
		note = fmt.Sprintf("%s: Python %s is a free-threaded build, which heaplens does not read (it reads CPython %s, default builds); %s", off, version, supportedPythons, leaks)
	case ring.PyBadOffsets:
		note = fmt.Sprintf("%s: the _Py_DebugOffsets of Python %s (its table of struct offsets for debuggers) are missing or do not fit the layout heaplens knows for that version; %s", off, version, leaks)
	case ring.PyOff:
		note = "Python frames are off and Python objects of 512 bytes or less are not sampled (--no-python); " + leaks
	}
	return version, note
}

// supportedPythons is the range of CPython versions whose frames heaplens reads.
const supportedPythons = "3.8 to 3.15"

// pymemNote says when Python objects were not all sampled: the library's
// PyMem hooks could not be put (back) in place, or sit over an allocator
// that is not pymalloc.
func pymemNote(p ring.Python) string {
	if p.Status != ring.PyActive {
		return ""
	}
	switch p.PyMem {
	case ring.PyMemLost:
		return "Python objects from pymalloc's arenas (512 bytes or less) were not sampled: the PyMem hooks could not be installed or were removed"
	case ring.PyMemForeign:
		return "Python's object allocator is not pymalloc: objects over 512 bytes were sampled only if it takes them from malloc"
	}
	return ""
}

func (c *Collector) code(s *stream, rc *ring.Code) {
	if s.py == nil {
		return
	}
	k := codeKey{rc.Addr, rc.Identity}
	c.pyCodes++
	s.py.codes[k] = &pyCode{
		file:  pyframe.DecodeString(rc.FileKind, rc.File),
		name:  pyframe.DecodeString(rc.NameKind, rc.Name),
		table: pyframe.NewTable(rc.Minor, rc.Table, rc.FirstLine),
	}
}

// classify says whether a native location is an eval activation and
// whether it belongs to the interpreter.
func (c *Collector) classify(s *stream, m *module, loc *capture.Location) stack.Class {
	if s.py == nil {
		return 0
	}
	var cl stack.Class
	if n := len(loc.Lines); n > 0 {
		fn := loc.Lines[n-1].Function // the function the pc physically sits in
		if fn == "_PyEval_EvalFrameDefault" || strings.HasPrefix(fn, "_PyEval_EvalFrameDefault.") {
			cl |= stack.Eval
		}
	}
	if m != nil && m == s.pyInterp() {
		cl |= stack.Interp
		if cl&stack.Eval == 0 && c.inEvalPart(s, m, loc.Address) {
			cl |= stack.Eval
		}
	}
	return cl
}

func (s *stream) pyInterp() *module {
	if s.py.interp == nil && s.py.eval != 0 {
		s.py.interp = s.lookup(s.py.eval + 1) // lookup expects a return address
	}
	return s.py.interp
}

// pyLocation returns the Location of one Python frame, writing it if new,
// and whether its code is known (the Location is then for good).
func (c *Collector) pyLocation(s *stream, f ring.PyFrame) (uint64, bool, error) {
	k := codeKey{f.Code, f.Identity}
	pk := pyPosKey{k, f.Pos}
	if id, ok := s.py.at[pk]; ok {
		return id, true, nil
	}
	code := s.py.codes[k]
	line := 0
	if code != nil {
		line = code.table.Line(f.Pos)
	}
	lk := pyLocKey{k, line}
	if id, ok := s.py.locs[lk]; ok {
		if code != nil {
			s.py.remember(pk, id)
		}
		return id, code != nil, nil
	}
	ln := capture.Line{Function: "<unknown Python code>", Line: line}
	if code != nil {
		ln.Function, ln.File = code.name, code.file
	}
	c.nextID++
	loc := &capture.Location{ID: c.nextID, Kind: capture.KindPython, Lines: []capture.Line{ln}}
	s.py.locs[lk] = loc.ID
	if code != nil { // an unknown code's frame gets its name when the code comes
		s.py.remember(pk, loc.ID)
	}
	return loc.ID, code != nil, c.w.Location(loc)
}

func (p *pyStream) remember(k pyPosKey, id uint64) {
	if p.at == nil || len(p.at) >= maxPyPositions {
		p.at = map[pyPosKey]uint64{}
	}
	p.at[k] = id
}

// mergePython appends to dst a sample's Python frames interleaved with its
// native ones (stack.MergePython), writing the Locations of Python frames
// seen first; known says whether the code of every frame was received (a
// frame of code not received yet gets another Location once it is).
func (c *Collector) mergePython(s *stream, dst []uint64, native *nativeStack, py []ring.PyFrame) (_ []uint64, known bool, err error) {
	ids, acts := s.py.ids[:0], s.py.acts[:0]
	// The outer frames shared with one of the latest samples' keep their
	// Locations, if their code was known (an unknown code's frame gets
	// another Location once its code comes): those of the one that shares
	// most, as the threads of a pool interleave their samples.
	prev, same := s.py.runs.mostShared(py, true)
	n, m, prevIDs := len(py), len(prev.ids), prev.ids
	start := 0
	s.py.unknown = s.py.unknown[:0]
	for i, f := range py {
		var id uint64
		if i >= n-same {
			id = prevIDs[m-n+i]
		} else {
			var ok bool
			if id, ok, err = c.pyLocation(s, f); err != nil {
				return dst, false, err
			}
			if !ok {
				s.py.unknown = append(s.py.unknown, i)
			}
		}
		ids = append(ids, id)
		if f.ActivationEnd {
			acts = append(acts, ids[start:len(ids):len(ids)])
			start = len(ids)
		}
	}
	if start < len(ids) {
		acts = append(acts, ids[start:])
	}
	s.py.ids, s.py.acts = ids, acts
	run := &s.py.runs.spare
	run.frames = append(run.frames[:0], py...)
	run.ids = append(run.ids[:0], ids...)
	for _, i := range s.py.unknown {
		run.ids[i] = 0 // not to be reused
	}
	s.py.runs.push()
	return stack.MergePython(dst, native.ids, native.classes, acts, c.NativePythonInternals), len(s.py.unknown) == 0, nil
}
