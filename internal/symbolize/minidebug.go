package symbolize

import (
	"bytes"
	"debug/elf"
	"io"

	"github.com/ulikunitz/xz"
)

// MiniDebugInfo (Fedora, RHEL, some Ubuntu builds): a stripped file may keep
// the symbols of its local functions in .gnu_debugdata, an xz-compressed ELF
// file holding only a symbol table. Bounds keep a hostile file from making
// the agent allocate without limit.
const (
	maxMiniCompressed   = 64 << 20
	maxMiniDecompressed = 256 << 20
)

// appendMiniDebugInfo adds the function symbols of ef's .gnu_debugdata, if
// it has one that decodes.
func appendMiniDebugInfo(dst []symbol, ef *elf.File) []symbol {
	s := ef.Section(".gnu_debugdata")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size > maxMiniCompressed {
		return dst
	}
	data, err := s.Data()
	if err != nil {
		return dst
	}
	r, err := xz.NewReader(bytes.NewReader(data))
	if err != nil {
		return dst
	}
	elfData, err := io.ReadAll(io.LimitReader(r, maxMiniDecompressed+1))
	if err != nil || len(elfData) > maxMiniDecompressed {
		return dst
	}
	mini, err := elf.NewFile(bytes.NewReader(elfData))
	if err != nil {
		return dst
	}
	return appendSymbols(dst, mini)
}
