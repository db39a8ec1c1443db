package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lookupAll exercises every code path a caller can reach on f.
func lookupAll(f *File, addrs []uint64) {
	for _, a := range addrs {
		f.Lookup(a)
	}
	f.BuildID()
}

func TestCorruptInput(t *testing.T) {
	dir := t.TempDir()
	bin := compile(t, dir, "victim", "c", "gcc", cSrc, "-g", "-O2", "-Wl,--build-id=sha1")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	addrs := sampleAddrs(t, bin, 3, cFuncs...)

	t.Run("truncated", func(t *testing.T) {
		ef, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		offs := []int{0, 1, 4, 16, 63, 64, 100, len(data) / 4, len(data) / 2, len(data) - 64, len(data) - 1}
		for _, s := range ef.Sections {
			if strings.HasPrefix(s.Name, ".debug_") || s.Name == ".symtab" || s.Name == ".strtab" {
				offs = append(offs, int(s.Offset), int(s.Offset+s.Size/2))
			}
		}
		ef.Close()
		for _, n := range offs {
			if n < 0 || n > len(data) {
				continue
			}
			p := filepath.Join(dir, "trunc")
			if err := os.WriteFile(p, data[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := OpenWith(p, nil)
			if err != nil {
				continue
			}
			lookupAll(f, addrs)
			f.Close()
		}
	})

	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewSource(1))
		for i := 0; i < 20; i++ {
			b := make([]byte, 64+rng.Intn(8192))
			rng.Read(b)
			if i%2 == 1 {
				copy(b, "\x7fELF\x02\x01\x01") // get past the magic check
			}
			p := filepath.Join(dir, "random")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := OpenWith(p, nil)
			if err == nil {
				lookupAll(f, addrs)
				f.Close()
			}
		}
	})

	// Mutate bytes inside the debug sections and symbol tables: Open must
	// succeed or fail cleanly, and Lookup must return, whatever it finds.
	t.Run("mutated", func(t *testing.T) {
		ef, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		var spans [][2]int
		for _, s := range ef.Sections {
			if strings.HasPrefix(s.Name, ".debug_") || s.Name == ".symtab" || s.Name == ".note.gnu.build-id" {
				spans = append(spans, [2]int{int(s.Offset), int(s.Size)})
			}
		}
		ef.Close()
		rng := rand.New(rand.NewSource(2))
		iters := 300
		if testing.Short() {
			iters = 30
		}
		for i := 0; i < iters; i++ {
			b := append([]byte(nil), data...)
			sp := spans[rng.Intn(len(spans))]
			for k := 0; k < 1+rng.Intn(16); k++ {
				if sp[1] > 0 {
					b[sp[0]+rng.Intn(sp[1])] = byte(rng.Intn(256))
				}
			}
			p := filepath.Join(dir, "mutated")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := OpenWith(p, nil)
			if err != nil {
				continue
			}
			lookupAll(f, addrs)
			f.Close()
		}
	})
}

func TestParseHelpersMalformed(t *testing.T) {
	le := binary.LittleEndian
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 2000; i++ {
		b := make([]byte, rng.Intn(64))
		rng.Read(b)
		parseAranges(b, le)
		unitHeaders(b, le)
		findBuildID(b, le, 4)
		findBuildID(b, le, 8)
	}
}
