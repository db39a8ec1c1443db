package collect

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/heaplens/heaplens/internal/unwind"
)

// TestEvalParts builds a program whose _PyEval_EvalFrameDefault GCC splits
// into a named part and a .cold one, strips it (leaving the exported name
// only), and checks that evalParts finds exactly the range the unstripped
// file's .cold symbol gives; unsplit (-O0), it finds none.
func TestEvalParts(t *testing.T) {
	for _, c := range []struct {
		name  string
		opt   string
		split bool
	}{
		{"split at -O2", "-O2", true},
		{"whole at -O0", "-O0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			bin, stripped := filepath.Join(dir, "cold"), filepath.Join(dir, "cold.stripped")
			for _, cmd := range [][]string{
				{"gcc", c.opt, "-rdynamic", "-o", bin, filepath.Join("testdata", "coldsplit.c")},
				{"objcopy", "--strip-all", bin, stripped},
			} {
				if b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
					t.Fatalf("%v: %v\n%s", cmd, err, b)
				}
			}
			var want []unwind.Range
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			syms, _ := f.Symbols()
			f.Close()
			for _, s := range syms {
				if s.Name == "_PyEval_EvalFrameDefault.cold" {
					want = append(want, unwind.Range{Begin: s.Value, End: s.Value + s.Size})
				}
			}
			if c.split != (len(want) == 1) {
				t.Fatalf("gcc %s made %d .cold parts of _PyEval_EvalFrameDefault, want split=%v: the test's premise fails", c.opt, len(want), c.split)
			}
			got, err := evalParts(stripped)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) || (len(want) == 1 && got[0] != want[0]) {
				t.Errorf("evalParts = %x, want %x (the .cold symbol of the unstripped file)", got, want)
			}
		})
	}
}
