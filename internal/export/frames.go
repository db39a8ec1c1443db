// Package export writes heap profiles in the formats people read or feed to
// other tools: text and folded stacks here; pprof, OTLP profiles, HTML and
// others reuse the labels defined in this file.
package export

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/heaplens/heaplens/internal/capture"
)

// FrameLabel returns the label of one frame: one line of a location, or the
// bare location when line is nil (nothing was symbolized). m is the
// location's mapping, or nil.
//
//	function (file.c:42)      source line known
//	function (libfoo.so)      function known, line unknown
//	0x7f12ab (libfoo.so)      nothing known but the module
//	0x7f12ab (?)              not even the module
//
// Only base names are shown for native frames: full paths make stacks
// unreadable and differ between build machines; pprof output keeps full
// paths. Python frames keep their co_filename as recorded,
// "qualname (path/to/file.py:LINE)": module paths are what tell two
// __init__.py apart. Frames made up when reading (capture.KindPool,
// KindMissing) are their bare name: "[pool: libgomp (openmp)]".
func FrameLabel(loc *capture.Location, line *capture.Line, m *capture.Mapping) string {
	switch {
	case line != nil && loc.Kind == capture.KindPython:
		if line.Line > 0 {
			return fmt.Sprintf("%s (%s:%d)", line.Function, line.File, line.Line)
		}
		return fmt.Sprintf("%s (%s)", line.Function, line.File)
	case line != nil && (loc.Kind == capture.KindPool || loc.Kind == capture.KindMissing):
		return line.Function
	}
	module := "?"
	if m != nil && m.File != "" {
		module = filepath.Base(m.File)
	}
	if line == nil {
		return fmt.Sprintf("0x%x (%s)", loc.Address, module)
	}
	fn := line.Function
	if fn == "" {
		fn = fmt.Sprintf("0x%x", loc.Address)
	}
	if line.Line > 0 && line.File != "" {
		return fmt.Sprintf("%s (%s:%d)", fn, filepath.Base(line.File), line.Line)
	}
	return fmt.Sprintf("%s (%s)", fn, module)
}

// StackFrames returns the frame labels of a stack, leaf first, with each
// location's inlined functions expanded (innermost first). Consecutive
// frames of one module without symbols (a stripped library) are one label,
// "0x7f12ab and 3 more frames (libfoo.so)". A loaded capture has no
// dangling references (capture.Resolve made placeholders of them).
func StackFrames(c *capture.Capture, stackID uint64) []string {
	return stackFrames(c, stackID, -1)
}

// stackFrames is StackFrames up to max labels (all if max < 0).
func stackFrames(c *capture.Capture, stackID uint64, max int) []string {
	st := c.Stacks[stackID]
	if st == nil { // 0: the allocation has no stack
		return []string{"<no stack>"}
	}
	n := len(st.Locations)
	if max >= 0 {
		n = min(n, max)
	}
	frames := make([]string, 0, n)
	for i := 0; i < len(st.Locations) && len(frames) != max; i++ {
		loc := c.Locations[st.Locations[i]]
		if loc == nil {
			continue
		}
		m := c.Mappings[loc.MappingID] // nil for MappingID 0 or dangling
		if len(loc.Lines) == 0 {
			n := 1 // the unknown frames of the same module that follow
			for ; i+n < len(st.Locations); n++ {
				next := c.Locations[st.Locations[i+n]]
				if next == nil || len(next.Lines) != 0 || next.MappingID != loc.MappingID || m == nil {
					break
				}
			}
			label := FrameLabel(loc, nil, m)
			if n > 1 {
				label = strings.Replace(label, " (", fmt.Sprintf(" and %d more frames (", n-1), 1)
			}
			frames = append(frames, label)
			i += n - 1
			continue
		}
		for i := 0; i < len(loc.Lines) && len(frames) != max; i++ {
			frames = append(frames, FrameLabel(loc, &loc.Lines[i], m))
		}
	}
	if len(frames) == 0 { // a stack the library could not unwind (see NoUnwind)
		frames = append(frames, "<no frames>")
	}
	return frames
}

// ProcessLabel names a stream's process as "[PID COMMAND]", COMMAND being
// the base name of the first command-line word, else of the executable.
func ProcessLabel(c *capture.Capture, stream uint32) string {
	p := c.Process(stream)
	if p == nil {
		return fmt.Sprintf("[? stream %d]", stream)
	}
	if cmd := processName(p); cmd != "" {
		return fmt.Sprintf("[%d %s]", p.PID, cmd)
	}
	return fmt.Sprintf("[%d]", p.PID)
}

// processName is the base name of a process's first command-line word,
// else of its executable; "" when neither is known.
func processName(p *capture.Process) string {
	if len(p.Cmdline) > 0 && p.Cmdline[0] != "" {
		return filepath.Base(p.Cmdline[0])
	}
	if p.Exe != "" {
		return filepath.Base(p.Exe)
	}
	return ""
}

// foldedSafe makes a label safe for the folded format, where ';' separates
// frames and a newline ends the line.
var foldedSafe = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")
