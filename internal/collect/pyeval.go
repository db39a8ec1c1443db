package collect

import (
	"debug/elf"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/arch/x86/x86asm"

	"github.com/heaplens/heaplens/internal/unwind"
)

// evalParts returns the file address ranges of the parts of the
// interpreter's _PyEval_EvalFrameDefault that the compiler moved out of line.
//
// An activation's native frame is found by its function's name. GCC's
// profile-guided builds of CPython 3.14 and 3.15 (Debian's) keep only the
// function's first kilobyte under its name and move the loop itself into a
// _PyEval_EvalFrameDefault.cold part that only the debug symbols name: in a
// stripped interpreter, every eval frame would be nameless. The named part
// jumps into that part; a direct jump out of a function is otherwise a tail
// call, which leaves from a torn-down frame to another function's entry. So
// an FDE is one of those parts when a jump of the named part lands in it
// from a frame that is not torn down, inside it rather than at its start,
// or at a start that does not look like a function's entry.
func evalParts(path string) ([]unwind.Range, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return nil, nil // the search decodes x86-64 code: elsewhere (arm64) the symbols' names decide
	}
	lo, hi, code, err := evalCode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	type jump struct{ from, to uint64 }
	var jumps []jump
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil || inst.Len == 0 {
			off++ // not code the decoder knows: resynchronise on the next byte
			continue
		}
		pc := lo + uint64(off)
		off += inst.Len
		if !isJump(inst.Op) {
			continue
		}
		rel, ok := inst.Args[0].(x86asm.Rel)
		if !ok {
			continue
		}
		if t := pc + uint64(inst.Len) + uint64(int64(rel)); t < lo || t >= hi {
			jumps = append(jumps, jump{pc, t})
		}
	}
	if len(jumps) == 0 {
		return nil, nil // the whole loop is under the name (pyenv's builds)
	}
	fdes, err := unwind.FDEs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	find := func(a uint64) *unwind.FDE {
		i := sort.Search(len(fdes), func(i int) bool { return fdes[i].Begin > a }) - 1
		if i < 0 || a >= fdes[i].End {
			return nil
		}
		return &fdes[i]
	}
	hot := find(lo)
	var parts []unwind.Range
	seen := map[unwind.Range]bool{}
	for _, j := range jumps {
		d := find(j.to)
		if d == nil || d == hot {
			continue
		}
		r := unwind.Range{Begin: d.Begin, End: d.End}
		if seen[r] {
			continue
		}
		if j.to != d.Begin || (hot != nil && !hot.AtEntry(j.from)) || !d.AtEntry(d.Begin) {
			seen[r] = true
			parts = append(parts, r)
		}
	}
	return parts, nil
}

// evalCode returns the address range and bytes of the function that
// _PyEval_EvalFrameDefault names in f's symbols.
func evalCode(f *elf.File) (lo, hi uint64, code []byte, err error) {
	syms, _ := f.DynamicSymbols()
	if s, _ := f.Symbols(); len(s) > 0 {
		syms = append(syms, s...)
	}
	for _, s := range syms {
		if s.Name != "_PyEval_EvalFrameDefault" || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Size > 1<<22 {
			continue
		}
		for _, sec := range f.Sections {
			if sec.Type != elf.SHT_PROGBITS || s.Value < sec.Addr || s.Value+s.Size > sec.Addr+sec.Size {
				continue
			}
			code = make([]byte, s.Size)
			if _, err := sec.ReadAt(code, int64(s.Value-sec.Addr)); err != nil {
				return 0, 0, nil, fmt.Errorf("reading _PyEval_EvalFrameDefault: %w", err)
			}
			return s.Value, s.Value + s.Size, code, nil
		}
	}
	return 0, 0, nil, errors.New("no _PyEval_EvalFrameDefault with a size in its symbols")
}

func isJump(op x86asm.Op) bool {
	switch op {
	case x86asm.JMP, x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE,
		x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS:
		return true
	}
	return false
}

// inEvalPart reports whether addr, in the interpreter's module m, lies in an
// out-of-line part of its eval function (evalParts, found once per file).
func (c *Collector) inEvalPart(s *stream, m *module, addr uint64) bool {
	if !s.py.partsKnown {
		s.py.partsKnown = true
		if c.pyEvalParts == nil {
			c.pyEvalParts = map[string][]unwind.Range{}
		}
		parts, ok := c.pyEvalParts[m.path]
		if !ok {
			parts, _ = evalParts(c.file(m.path)) // none found: frames are placed by name alone, as before
			c.pyEvalParts[m.path] = parts
		}
		s.py.parts = parts
	}
	v := addr - m.bias
	for _, r := range s.py.parts {
		if v >= r.Begin && v < r.End {
			return true
		}
	}
	return false
}
