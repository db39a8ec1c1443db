package unwind

import (
	"encoding/binary"
	"errors"
)

// ehFrame is an .eh_frame section: its bytes and the addresses that
// pc-relative and data-relative pointers in it are relative to.
type ehFrame struct {
	data    []byte
	addr    uint64 // vaddr of data[0]
	hdrAddr uint64 // vaddr of .eh_frame_hdr (DW_EH_PE_datarel)
	hasHdr  bool
}

// A cursor reads little-endian values from x.data[pos:end]. A read past end
// sets bad and returns zero, so that a parser checks once, after a group of
// reads, instead of after each.
type cursor struct {
	x        *ehFrame
	pos, end int
	bad      bool
}

func (c *cursor) take(n int) []byte {
	if c.bad || n < 0 || n > c.end-c.pos {
		c.bad = true
		return nil
	}
	b := c.x.data[c.pos : c.pos+n]
	c.pos += n
	return b
}

func (c *cursor) u8() uint8 {
	if b := c.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (c *cursor) u16() uint16 {
	if b := c.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (c *cursor) u32() uint32 {
	if b := c.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (c *cursor) u64() uint64 {
	if b := c.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// uleb reads an unsigned LEB128 number; bits beyond 64 are dropped.
func (c *cursor) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := c.u8()
		if c.bad {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b < 0x80 {
			return v
		}
	}
}

// sleb reads a signed LEB128 number; bits beyond 64 are dropped.
func (c *cursor) sleb() int64 {
	var v int64
	shift := uint(0)
	for {
		b := c.u8()
		if c.bad {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b < 0x80 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// skip advances over n bytes (a ULEB-sized block, say).
func (c *cursor) skip(n uint64) {
	if n > uint64(c.end-c.pos) {
		c.bad = true
		return
	}
	c.take(int(n))
}

// cstring reads a NUL-terminated string.
func (c *cursor) cstring() string {
	for i := c.pos; i < c.end; i++ {
		if c.x.data[i] == 0 {
			s := string(c.x.data[c.pos:i])
			c.pos = i + 1
			return s
		}
	}
	c.bad = true
	return ""
}

// Pointer encodings (DW_EH_PE_*): the low nibble is the value's format,
// bits 4–6 what it is relative to.
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peDatarel = 0x30
	peAligned = 0x50
	peOmit    = 0xff
)

var errEncoding = errors.New("unsupported pointer encoding")

// value reads a value of format enc&0x0f, sign-extending the signed ones.
func (c *cursor) value(enc uint8) (uint64, error) {
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		return c.u64(), nil
	case peUleb128:
		return c.uleb(), nil
	case peUdata2:
		return uint64(c.u16()), nil
	case peUdata4:
		return uint64(c.u32()), nil
	case peSleb128:
		return uint64(c.sleb()), nil
	case peSdata2:
		return uint64(int64(int16(c.u16()))), nil
	case peSdata4:
		return uint64(int64(int32(c.u32()))), nil
	}
	return 0, errEncoding
}

// pointer reads an address encoded as enc: relative to its own field
// (pcrel) or to .eh_frame_hdr (datarel). Indirect pointers and the other
// bases are not addresses of code in this file.
func (c *cursor) pointer(enc uint8) (uint64, error) {
	field := c.x.addr + uint64(c.pos)
	if enc == peOmit || enc&0x80 != 0 {
		return 0, errEncoding
	}
	v, err := c.value(enc)
	if err != nil {
		return 0, err
	}
	switch enc & 0x70 {
	case 0:
		return v, nil
	case pePcrel:
		return v + field, nil
	case peDatarel:
		if c.x.hasHdr {
			return v + c.x.hdrAddr, nil
		}
	}
	return 0, errEncoding
}

// skipPointer reads past a pointer that is not needed (the personality
// routine's), whatever it is relative to or whether it is indirect.
func (c *cursor) skipPointer(enc uint8) error {
	if enc == peOmit {
		return nil
	}
	if enc&0x70 == peAligned {
		return errEncoding
	}
	_, err := c.value(enc)
	return err
}

// An entry is one CIE or FDE: body is what follows the CIE pointer field.
type entry struct {
	off      int // of the length field, in the section
	idPos    int // of the CIE pointer field
	id       uint64
	body     int // start of the rest
	end      int // end of the entry
	isCIE    bool
	ciePos   int // an FDE's CIE, as a section offset (may be out of range)
	cieValid bool
}

// next reads the entry at off. done is true at the terminator or the end
// of the section; an error means the section's structure is broken there
// (a length running past its end), and parsing stops.
func (x *ehFrame) next(off int) (e entry, done bool, err error) {
	if off >= len(x.data) {
		return e, true, nil
	}
	c := cursor{x: x, pos: off, end: len(x.data)}
	length := uint64(c.u32())
	idSize := 4
	if length == 0xffffffff {
		length, idSize = c.u64(), 8
	}
	if c.bad {
		return e, false, errors.New("truncated entry length")
	}
	if length == 0 {
		return e, true, nil
	}
	if length > uint64(len(x.data)-c.pos) || length < uint64(idSize) {
		return e, false, errors.New("entry length runs past the section")
	}
	e = entry{off: off, idPos: c.pos, end: c.pos + int(length)}
	if idSize == 4 {
		e.id = uint64(c.u32())
	} else {
		e.id = c.u64()
	}
	e.body = c.pos
	e.isCIE = e.id == 0
	if !e.isCIE && e.id <= uint64(e.idPos) {
		e.ciePos, e.cieValid = e.idPos-int(e.id), true
	}
	return e, false, nil
}

// cie is a parsed CIE: what its FDEs need.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    uint8 // pointer encoding of its FDEs' pc_begin
	aug       bool  // 'z': its FDEs carry augmentation data
	signal    bool  // 'S': its FDEs describe signal frames
	insns     cursor
}

// parseCIE reads the CIE e. An error means its FDEs' ranges cannot be read.
func (x *ehFrame) parseCIE(e entry) (*cie, error) {
	c := cursor{x: x, pos: e.body, end: e.end}
	ci := &cie{fdeEnc: peAbsptr}
	ver := c.u8()
	augStr := c.cstring()
	if c.bad {
		return nil, errors.New("truncated CIE")
	}
	if ver != 1 && ver != 3 && ver != 4 {
		return nil, errors.New("unsupported CIE version")
	}
	if ver == 4 && (c.u8() != 8 || c.u8() != 0) {
		return nil, errors.New("CIE address or segment size is not 8 and 0")
	}
	ci.codeAlign = c.uleb()
	ci.dataAlign = c.sleb()
	if ver == 1 {
		ci.raReg = uint64(c.u8())
	} else {
		ci.raReg = c.uleb()
	}
	if augStr != "" {
		if augStr[0] != 'z' {
			return nil, errors.New("unsupported CIE augmentation")
		}
		if err := ci.readAug(&c, augStr[1:]); err != nil {
			return nil, err
		}
	}
	if c.bad {
		return nil, errors.New("truncated CIE")
	}
	ci.insns = c
	return ci, nil
}

// readAug reads the augmentation data of a 'z' CIE. Like libgcc, it stops
// at a letter it does not know, as the length says where the data ends.
func (ci *cie) readAug(c *cursor, letters string) error {
	ci.aug = true
	n := c.uleb()
	if c.bad || n > uint64(c.end-c.pos) {
		return errors.New("CIE augmentation data runs past the CIE")
	}
	end := c.pos + int(n)
	a := cursor{x: c.x, pos: c.pos, end: end}
	c.pos = end
loop:
	for _, l := range []byte(letters) {
		switch l {
		case 'R':
			ci.fdeEnc = a.u8()
		case 'P':
			if err := a.skipPointer(a.u8()); err != nil {
				return err
			}
		case 'L':
			a.u8()
		case 'S':
			ci.signal = true
		case 'B':
		default:
			break loop
		}
	}
	if a.bad {
		return errors.New("truncated CIE augmentation data")
	}
	return nil
}

// fde is an FDE whose range could be read.
type fde struct {
	off        int // of the FDE in the section, as readelf names it
	begin, end uint64
	cie        *cie
	insns      cursor
	bad        bool // its instructions cannot be found: all of it is unknown
}

var errRange = errors.New("FDE range cannot be read")

// parseFDE reads the FDE e of CIE ci. errRange means its range cannot be
// read; otherwise a malformed FDE comes back with bad set.
func (x *ehFrame) parseFDE(e entry, ci *cie) (fde, error) {
	c := cursor{x: x, pos: e.body, end: e.end}
	f := fde{off: e.off, cie: ci}
	begin, err := c.pointer(ci.fdeEnc)
	if err != nil {
		return f, errRange
	}
	size, err := c.value(ci.fdeEnc)
	if err != nil || c.bad || begin+size < begin {
		return f, errRange
	}
	f.begin, f.end = begin, begin+size
	if ci.aug {
		c.skip(c.uleb())
	}
	f.insns = c
	f.bad = c.bad
	return f, nil
}

// fdes returns the FDEs of the section whose ranges can be read, in section
// order. A CIE that cannot be parsed makes its FDEs unreadable; a broken
// section structure ends the list there.
func (x *ehFrame) fdes() []fde {
	var out []fde
	cies := map[int]*cie{}
	bad := map[int]bool{}
	for off := 0; ; {
		e, done, err := x.next(off)
		if done || err != nil {
			return out
		}
		off = e.end
		if e.isCIE || !e.cieValid || bad[e.ciePos] {
			continue
		}
		ci := cies[e.ciePos]
		if ci == nil {
			ci = x.cieAt(e.ciePos)
			if ci == nil {
				bad[e.ciePos] = true
				continue
			}
			cies[e.ciePos] = ci
		}
		if f, err := x.parseFDE(e, ci); err == nil {
			out = append(out, f)
		}
	}
}

// cieAt parses the CIE at section offset off, or returns nil.
func (x *ehFrame) cieAt(off int) *cie {
	e, done, err := x.next(off)
	if done || err != nil || !e.isCIE {
		return nil
	}
	ci, err := x.parseCIE(e)
	if err != nil {
		return nil
	}
	return ci
}
