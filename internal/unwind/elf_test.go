package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"
)

// testELF returns a minimal ELF64 x86-64 shared object with the sections
// .eh_frame (eh, at ehAddr), .note.gnu.build-id (id; none if id is nil),
// .eh_frame_hdr (at hdrAddr; none if it is 0) and .shstrtab.
func testELF(eh []byte, ehAddr uint64, id []byte, hdrAddr uint64) []byte {
	type section struct {
		name      string
		typ       elf.SectionType
		addr      uint64
		align     uint64
		data      []byte
		nameOff   int
		offInFile int
	}
	le := binary.LittleEndian
	var note []byte
	if id != nil {
		note = le.AppendUint32(note, 4)
		note = le.AppendUint32(note, uint32(len(id)))
		note = le.AppendUint32(note, ntGNUBuildID)
		note = append(note, "GNU\x00"...)
		note = append(note, id...)
		for len(note)%4 != 0 {
			note = append(note, 0)
		}
	}
	secs := []*section{{name: ".eh_frame", typ: elf.SHT_PROGBITS, addr: ehAddr, align: 8, data: eh}}
	if id != nil {
		secs = append(secs, &section{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, addr: 0x200, align: 4, data: note})
	}
	if hdrAddr != 0 {
		secs = append(secs, &section{name: ".eh_frame_hdr", typ: elf.SHT_PROGBITS, addr: hdrAddr, align: 4, data: make([]byte, 8)})
	}
	strtab := &section{name: ".shstrtab", typ: elf.SHT_STRTAB, align: 1}
	secs = append(secs, strtab)
	strtab.data = []byte{0}
	for _, s := range secs {
		s.nameOff = len(strtab.data)
		strtab.data = append(strtab.data, s.name+"\x00"...)
	}

	b := make([]byte, 64)
	for _, s := range secs {
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
		s.offInFile = len(b)
		b = append(b, s.data...)
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	shoff := len(b)
	b = append(b, make([]byte, 64)...) // the null section
	for _, s := range secs {
		flags := uint64(elf.SHF_ALLOC)
		if s.typ == elf.SHT_STRTAB {
			flags = 0
		}
		b = le.AppendUint32(b, uint32(s.nameOff))
		b = le.AppendUint32(b, uint32(s.typ))
		b = le.AppendUint64(b, flags)
		b = le.AppendUint64(b, s.addr)
		b = le.AppendUint64(b, uint64(s.offInFile))
		b = le.AppendUint64(b, uint64(len(s.data)))
		b = le.AppendUint32(b, 0) // link
		b = le.AppendUint32(b, 0) // info
		b = le.AppendUint64(b, s.align)
		b = le.AppendUint64(b, 0) // entsize
	}

	h := b[:64]
	copy(h, []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	le.PutUint16(h[16:], uint16(elf.ET_DYN))
	le.PutUint16(h[18:], uint16(elf.EM_X86_64))
	le.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(h[40:], uint64(shoff))
	le.PutUint16(h[52:], 64) // ehsize
	le.PutUint16(h[58:], 64) // shentsize
	le.PutUint16(h[60:], uint16(len(secs)+1))
	le.PutUint16(h[62:], uint16(len(secs))) // .shstrtab is last
	return b
}

func openTestELF(t testing.TB, b []byte) *elf.File {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the test's ELF file: %v", err)
	}
	return f
}

// Build's errors for files it cannot compile, and the build ID it reads.
func TestBuildErrors(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef}
	good := testELF(nil, 0x1000, id, 0)
	f := openTestELF(t, good)
	if got, err := BuildID(f); err != nil || !bytes.Equal(got, id) {
		t.Errorf("BuildID = %x, %v; want %x", got, err, id)
	}
	if _, err := Build(f); err != nil {
		t.Errorf("an empty .eh_frame: %v, want a table", err)
	}
	machine := bytes.Clone(good)
	binary.LittleEndian.PutUint16(machine[18:], uint16(elf.EM_RISCV))
	long := testELF(nil, 0x1000, make([]byte, 65), 0)
	noEH := bytes.Clone(good)
	copy(noEH[bytes.Index(noEH, []byte(".eh_frame\x00")):], ".xx_frame")
	for _, tc := range []struct {
		name string
		elf  []byte
	}{
		{"neither x86-64 nor arm64", machine},
		{"no build ID", testELF(nil, 0x1000, nil, 0)},
		{"a build ID of 65 bytes", long},
		{"no .eh_frame", noEH},
	} {
		if b, err := Build(openTestELF(t, tc.elf)); err == nil {
			t.Errorf("%s: Build gave %d bytes, want an error", tc.name, len(b))
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	if _, err := Build(openTestELF(t, testELF(nil, 0x1000, make([]byte, 64), 0))); err != nil {
		t.Errorf("a build ID of 64 bytes: %v", err)
	}
}

// A file without section headers has its build ID in a PT_NOTE segment
// (libc's: its notes are in two segments, one of them 8-aligned).
func TestBuildIDFromSegments(t *testing.T) {
	f, err := elf.Open(oracleFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := BuildID(f)
	if err != nil {
		t.Fatal(err)
	}
	f.Sections = nil
	if got, err := BuildID(f); err != nil || !bytes.Equal(got, want) {
		t.Errorf("from the segments: %x, %v; from the sections: %x", got, err, want)
	}
	f.Progs = nil
	if got, err := BuildID(f); err == nil {
		t.Errorf("no sections and no segments: got %x, want an error", got)
	}
}
