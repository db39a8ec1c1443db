package stack

// Class says what a native frame is to the Python interpreter.
type Class uint8

const (
	Eval   Class = 1 << iota // a _PyEval_EvalFrameDefault activation
	Interp                   // inside the interpreter's own module
)

// MergePython puts each activation's Python frames where its eval frame
// sits in the native stack (both innermost first), following the markers
// the library read, never guessing from counts alone:
//   - as many eval frames as activations: pair them in order;
//   - more eval frames: pair from the outermost (the innermost eval frame
//     has not pushed its Python frame yet, or is mid-call);
//   - fewer: pair from the innermost and put the rest at the bottom.
//
// native holds Location IDs, class says what each is (0: ordinary code),
// acts the Location IDs of each activation's Python frames. The
// interpreter's own native frames are left out when Python frames exist,
// unless keepInterp.
func MergePython(native []uint64, class func(id uint64) Class, acts [][]uint64, keepInterp bool) []uint64 {
	var evals []int
	for i, id := range native {
		if class(id)&Eval != 0 {
			evals = append(evals, i)
		}
	}
	pair := map[int]int{} // native index -> activation
	k, b := len(acts), len(evals)
	switch {
	case b >= k:
		for j := 0; j < k; j++ {
			pair[evals[b-1-j]] = k - 1 - j
		}
	default:
		for j := 0; j < b; j++ {
			pair[evals[j]] = j
		}
	}
	n := len(native)
	for _, a := range acts {
		n += len(a)
	}
	out := make([]uint64, 0, n)
	for i, id := range native {
		if a, ok := pair[i]; ok {
			out = append(out, acts[a]...)
			continue
		}
		if class(id)&Interp != 0 && !keepInterp && k > 0 {
			continue
		}
		out = append(out, id)
	}
	for j := b; j < k; j++ { // activations with no eval frame found: at the bottom
		out = append(out, acts[j]...)
	}
	return out
}
