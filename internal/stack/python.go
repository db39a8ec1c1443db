package stack

// Class says what a native frame is to the Python interpreter.
type Class uint8

const (
	Eval   Class = 1 << iota // a _PyEval_EvalFrameDefault activation
	Interp                   // inside the interpreter's own module
)

// MergePython appends to dst each activation's Python frames where its eval
// frame sits in the native stack (both innermost first), following the
// markers the library read, never guessing from counts alone:
//   - as many eval frames as activations: pair them in order;
//   - more eval frames: pair from the outermost (the innermost eval frame
//     has not pushed its Python frame yet, or is mid-call);
//   - fewer: pair from the innermost and put the rest at the bottom.
//
// native holds Location IDs, classes what each is (0: ordinary code),
// acts the Location IDs of each activation's Python frames. The
// interpreter's own native frames are left out when Python frames exist,
// unless keepInterp.
func MergePython(dst, native []uint64, classes []Class, acts [][]uint64, keepInterp bool) []uint64 {
	k, b := len(acts), 0
	for _, c := range classes {
		if c&Eval != 0 {
			b++
		}
	}
	// The e-th eval frame from the innermost takes activation first+e, if there is one.
	first := 0
	if b >= k {
		first = k - b
	}
	e := 0
	for i, id := range native {
		c := classes[i]
		if c&Eval != 0 {
			a := first + e
			e++
			if a >= 0 && a < k {
				dst = append(dst, acts[a]...)
				continue
			}
		}
		if Drops(c, k, keepInterp) {
			continue
		}
		dst = append(dst, id)
	}
	for j := b; j < k; j++ { // activations with no eval frame found: at the bottom
		dst = append(dst, acts[j]...)
	}
	return dst
}

// Drops reports whether MergePython leaves out a native frame of class c
// that takes no activation, in a stack of acts activations.
func Drops(c Class, acts int, keepInterp bool) bool { return c&Interp != 0 && !keepInterp && acts > 0 }
