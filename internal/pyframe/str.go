package pyframe

import (
	"encoding/binary"
	"unicode/utf8"
)

// DecodeString converts the data of a PEP 393 string to UTF-8. kind is the
// string's storage kind: 1 = one byte per code point (latin-1, which
// includes the ASCII-only "compact ascii" case), 2 = two bytes per code
// point (UCS-2, little-endian), 4 = four bytes per code point (UCS-4,
// little-endian).
//
// Python strings may hold lone surrogates (U+D800–U+DFFF), which UTF-8
// cannot represent; each becomes U+FFFD. In particular a kind 2 string never
// holds UTF-16 surrogate pairs — CPython stores any code point above U+FFFF
// as kind 4 — so two adjacent surrogates in kind 2 data are two separate
// code points in Python and two U+FFFD here, not one astral character.
// Kind 4 values above U+10FFFF also become U+FFFD, as does a trailing
// partial code unit (data cut short). An unknown kind yields "".
func DecodeString(kind uint8, data []byte) string {
	switch kind {
	case 1:
		ascii := true
		for _, c := range data {
			if c >= utf8.RuneSelf {
				ascii = false
				break
			}
		}
		if ascii {
			return string(data)
		}
		buf := make([]byte, 0, len(data)*2)
		for _, c := range data {
			buf = utf8.AppendRune(buf, rune(c))
		}
		return string(buf)
	case 2, 4:
		size := int(kind)
		buf := make([]byte, 0, len(data)/size*3+3)
		for i := 0; i+size <= len(data); i += size {
			var r rune
			if size == 2 {
				r = rune(binary.LittleEndian.Uint16(data[i:]))
			} else {
				u := binary.LittleEndian.Uint32(data[i:])
				if u > utf8.MaxRune {
					u = utf8.RuneError
				}
				r = rune(u)
			}
			// AppendRune writes U+FFFD for surrogates.
			buf = utf8.AppendRune(buf, r)
		}
		if len(data)%size != 0 {
			buf = utf8.AppendRune(buf, utf8.RuneError)
		}
		return string(buf)
	}
	return ""
}
