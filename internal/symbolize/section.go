package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// Compression types of an ELF compression header (Elf*_Chdr.ch_type).
const (
	elfCompressZlib = 1
	elfCompressZstd = 2
)

// maxInflate bounds a compressed section's claimed size relative to its
// compressed bytes, so a corrupt header cannot make us allocate gigabytes.
const maxInflate = 1024

// compressedSection reads an SHF_COMPRESSED section itself instead of
// through Section.Data: debug/elf inflates with compress/flate, and the
// separate debug files of distributions (libc6-dbg: 4 MB compressed, 10 MB
// inflated) are compressed. klauspost/compress inflates the same bytes
// about 1.4× faster, and this is the largest part of symbolizing a program
// for the first time. ra reads the ELF file s belongs to.
func compressedSection(ef *elf.File, ra io.ReaderAt, s *elf.Section) ([]byte, error) {
	if s.FileSize > 1<<32 {
		return nil, fmt.Errorf("compressed section of %d bytes", s.FileSize)
	}
	raw := make([]byte, s.FileSize)
	if _, err := ra.ReadAt(raw, int64(s.Offset)); err != nil {
		return nil, err
	}
	var typ uint32
	var size uint64
	var hdr int
	bo := ef.ByteOrder
	switch ef.Class {
	case elf.ELFCLASS64: // ch_type, ch_reserved, ch_size, ch_addralign
		if len(raw) < 24 {
			return nil, fmt.Errorf("short compression header")
		}
		typ, size, hdr = bo.Uint32(raw), bo.Uint64(raw[8:]), 24
	case elf.ELFCLASS32: // ch_type, ch_size, ch_addralign
		if len(raw) < 12 {
			return nil, fmt.Errorf("short compression header")
		}
		typ, size, hdr = bo.Uint32(raw), uint64(bo.Uint32(raw[4:])), 12
	default:
		return nil, fmt.Errorf("unknown ELF class %v", ef.Class)
	}
	if size > 1<<32 || size > uint64(len(raw))*maxInflate {
		return nil, fmt.Errorf("implausible inflated size %d", size)
	}
	out := make([]byte, size)
	switch typ {
	case elfCompressZlib:
		zr, err := zlib.NewReader(bytes.NewReader(raw[hdr:]))
		if err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(zr, out); err != nil {
			return nil, err
		}
		return out, nil
	case elfCompressZstd:
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(size+1))
		if err != nil {
			return nil, err
		}
		defer dec.Close()
		got, err := dec.DecodeAll(raw[hdr:], out[:0])
		if err != nil {
			return nil, err
		}
		if uint64(len(got)) != size {
			return nil, fmt.Errorf("inflated to %d bytes, header says %d", len(got), size)
		}
		return got, nil
	}
	return nil, fmt.Errorf("unknown compression type %d", typ)
}

// sectionData returns the contents of s, inflating an SHF_COMPRESSED
// section with compressedSection when ra is known.
func sectionData(ef *elf.File, ra io.ReaderAt, s *elf.Section) ([]byte, error) {
	if s.Flags&elf.SHF_COMPRESSED != 0 && ra != nil {
		return compressedSection(ef, ra, s)
	}
	return s.Data()
}
