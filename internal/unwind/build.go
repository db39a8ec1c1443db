package unwind

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// BuildID returns the GNU build ID (the NT_GNU_BUILD_ID note) of f, from
// its SHT_NOTE sections or, in a file without sections, its PT_NOTE
// segments.
func BuildID(f *elf.File) ([]byte, error) {
	id, err := buildID(f)
	if err != nil {
		return nil, fmt.Errorf("unwind: %w", err)
	}
	return id, nil
}

// maxNotes bounds the note sections and segments read: build IDs are in
// small ones, and a hostile header must not make us read a huge one.
const maxNotes = 1 << 20

// ntGNUBuildID is the type of a GNU build ID note ("GNU" owner).
const ntGNUBuildID = 3

func buildID(f *elf.File) ([]byte, error) {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxNotes {
			continue
		}
		if data, err := s.Data(); err == nil {
			if id := noteBuildID(data, s.Addralign); id != nil {
				return id, nil
			}
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNotes {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), data); err == nil {
			if id := noteBuildID(data, p.Align); id != nil {
				return id, nil
			}
		}
	}
	return nil, errors.New("no GNU build ID")
}

// noteBuildID returns the descriptor of the first non-empty GNU build ID
// note in data, a run of notes whose fields are padded to align (4, or 8
// in an 8-aligned section or segment).
func noteBuildID(data []byte, align uint64) []byte {
	pad := uint64(3)
	if align == 8 {
		pad = 7
	}
	le := binary.LittleEndian
	for len(data) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(data)), uint64(le.Uint32(data[4:])), le.Uint32(data[8:])
		data = data[12:]
		if namesz > uint64(len(data)) {
			return nil
		}
		name := data[:namesz]
		data = data[min((namesz+pad)&^pad, uint64(len(data))):]
		if descsz > uint64(len(data)) {
			return nil
		}
		desc := data[:descsz]
		data = data[min((descsz+pad)&^pad, uint64(len(data))):]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && len(desc) > 0 {
			return bytes.Clone(desc)
		}
	}
	return nil
}

// builderVersion must change whenever Build's output for the same file
// changes (a fix in reading CFI, a new kind of rule): it is part of the
// table cache's key, so tables of an older builder are not reused.
const builderVersion = 1

// Build compiles f's .eh_frame into a table file (docs/unwind-format.md).
// It fails for a file that is not ELF64 x86-64, has no .eh_frame or no
// build ID of at most 64 bytes, or whose rows number more than 2^24 or
// span more than 4 GiB. Malformed call-frame information is no error: an
// FDE that cannot be followed is unknown (kind 2) over its range, one
// whose range cannot be read is left out, and a broken section structure
// ends the table where it breaks.
func Build(f *elf.File) ([]byte, error) {
	c, err := compile(f)
	if err != nil {
		return nil, fmt.Errorf("unwind: %w", err)
	}
	return c.table.bytes(), nil
}

// BuildFile opens the ELF file at path and compiles it as Build does; it
// also returns the file's build ID.
func BuildFile(path string) (table []byte, id []byte, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("unwind: %w", err)
	}
	defer f.Close()
	c, err := compile(f)
	if err != nil {
		return nil, nil, fmt.Errorf("unwind: %s: %w", path, err)
	}
	return c.table.bytes(), c.table.ID, nil
}

// compiled is a compiled table and, for the tests, the FDEs that have no
// rows in it and why (by their offsets in .eh_frame, as readelf names them).
type compiled struct {
	arch    *arch
	table   *Table
	skipped map[int]string
}

func compile(f *elf.File) (*compiled, error) {
	a, ok := archOf(f.Machine)
	if f.Class != elf.ELFCLASS64 || !ok || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%v %v %v file, want ELFCLASS64 EM_X86_64 or EM_AARCH64 ELFDATA2LSB", f.Class, f.Machine, f.Data)
	}
	id, err := buildID(f)
	if err != nil {
		return nil, err
	}
	if len(id) > maxIDLen {
		return nil, fmt.Errorf("build ID of %d bytes, longer than %d", len(id), maxIDLen)
	}
	x, err := ehFrameOf(f)
	if err != nil {
		return nil, err
	}
	c := &compiled{arch: a, table: &Table{ID: id}, skipped: map[int]string{}}
	if err := c.rows(x.fdes()); err != nil {
		return nil, err
	}
	return c, nil
}

// ehFrameOf reads f's .eh_frame section.
func ehFrameOf(f *elf.File) (*ehFrame, error) {
	s := f.Section(".eh_frame")
	if s == nil {
		return nil, errors.New("no .eh_frame section")
	}
	if s.Type == elf.SHT_NOBITS {
		return nil, errors.New(".eh_frame has no data in the file")
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf(".eh_frame: %w", err)
	}
	x := &ehFrame{data: data, addr: s.Addr}
	if h := f.Section(".eh_frame_hdr"); h != nil {
		x.hdrAddr, x.hasHdr = h.Addr, true
	}
	return x, nil
}

// rows compiles the FDEs into c.table: in address order, leaving out those
// that are empty, at address 0 (discarded in a link) or that start inside
// the one before (libgcc's search would find either), with rows of kind 2
// between FDEs that do not touch and at the end of the last.
func (c *compiled) rows(fdes []fde) error {
	slices.SortStableFunc(fdes, func(a, b fde) int { return cmp.Compare(a.begin, b.begin) })
	t := c.table
	var end uint64
	started := false
	for i := range fdes {
		f := &fdes[i]
		switch {
		case f.begin == 0:
			c.skipped[f.off] = "at address 0"
		case f.begin == f.end:
			c.skipped[f.off] = "empty"
		case started && f.begin < end:
			c.skipped[f.off] = "overlaps the one before"
		default:
			if !started {
				t.Base, started = f.begin, true
			} else if f.begin > end {
				t.emit(end, unknown)
			}
			runFDE(c.arch, f, t.emit)
			end = f.end
		}
	}
	if !started {
		// Nothing is covered; a table that says so keeps the library from
		// looking for one again.
		t.Addr, t.Rule = []uint32{0}, []uint32{unknown}
		return nil
	}
	if end-t.Base > math.MaxUint32 {
		return fmt.Errorf("rows span %#x bytes from %#x, more than 4 GiB", end-t.Base, t.Base)
	}
	// The last row is at the end of the last FDE even when the row before
	// is of kind 2 too: the library would take an address before it as
	// outside the table, which it treats the same, but Lookup would not.
	t.Addr, t.Rule = append(t.Addr, uint32(end-t.Base)), append(t.Rule, unknown)
	if len(t.Addr) > maxRows {
		return fmt.Errorf("%d rows, more than %d", len(t.Addr), maxRows)
	}
	return nil
}

// emit adds the row that starts at addr (at or after the last row's
// start): one at the same address replaces the last, and one with the
// same rule as the row before it is not needed. Rows beyond 4 GiB of Base
// are dropped: rows reports the span.
func (t *Table) emit(addr uint64, rule uint32) {
	if addr-t.Base > math.MaxUint32 {
		return
	}
	a := uint32(addr - t.Base)
	n := len(t.Addr)
	if n > 0 && t.Addr[n-1] == a {
		t.Addr, t.Rule = t.Addr[:n-1], t.Rule[:n-1]
		n--
	}
	if n > 0 && t.Rule[n-1] == rule {
		return
	}
	t.Addr, t.Rule = append(t.Addr, a), append(t.Rule, rule)
}
