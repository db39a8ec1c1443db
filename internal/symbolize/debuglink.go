package symbolize

import (
	"bytes"
	"debug/elf"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// findDebugFile looks for the separate debug file of the file at path, the
// way gdb does: first by build ID under each root
// (<root>/.build-id/xx/rest.debug), then by the .gnu_debuglink name next to
// the file, in its .debug subdirectory, and under each root mirrored by the
// file's directory. It returns the parsed debug file and its open handle, or
// nils.
func findDebugFile(path string, ef *elf.File, id string, roots []string) (*elf.File, *os.File) {
	if len(id) > 2 {
		for _, root := range roots {
			p := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
			if df, osf := openDebugFile(p, path, id, nil); df != nil {
				return df, osf
			}
		}
	}
	name, crc, ok := debugLink(ef)
	if !ok {
		return nil, nil
	}
	var dirs []string
	if abs, err := filepath.Abs(path); err == nil {
		dirs = append(dirs, filepath.Dir(abs))
		if real, err := filepath.EvalSymlinks(abs); err == nil && filepath.Dir(real) != filepath.Dir(abs) {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	for _, dir := range dirs {
		cands := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name)}
		for _, root := range roots {
			cands = append(cands, filepath.Join(root, dir, name))
		}
		for _, p := range cands {
			if df, osf := openDebugFile(p, path, id, &crc); df != nil {
				return df, osf
			}
		}
	}
	return nil, nil
}

// openDebugFile opens candidate p and accepts it if it is not the original
// file itself, carries DWARF, and matches: same build ID when both have one,
// else (for debuglink candidates) the CRC the link recorded.
func openDebugFile(p, orig, id string, crc *uint32) (df *elf.File, osf *os.File) {
	defer func() {
		if r := recover(); r != nil {
			if osf != nil {
				osf.Close()
			}
			df, osf = nil, nil
		}
	}()
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	if ofi, err := os.Stat(orig); err == nil && os.SameFile(fi, ofi) {
		return nil, nil
	}
	osf, err = os.Open(p)
	if err != nil {
		return nil, nil
	}
	reject := func() (*elf.File, *os.File) {
		osf.Close()
		return nil, nil
	}
	df, err = elf.NewFile(osf)
	if err != nil || !hasDWARF(df) {
		return reject()
	}
	did := buildID(df)
	switch {
	case id != "" && did != "":
		if did != id {
			return reject()
		}
	case crc != nil:
		h := crc32.NewIEEE()
		if _, err := io.Copy(h, io.NewSectionReader(osf, 0, fi.Size())); err != nil || h.Sum32() != *crc {
			return reject()
		}
	}
	return df, osf
}

// debugLink returns the file name and CRC32 of the .gnu_debuglink section.
func debugLink(ef *elf.File) (string, uint32, bool) {
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return "", 0, false
	}
	b, err := s.Data()
	if err != nil {
		return "", 0, false
	}
	n := bytes.IndexByte(b, 0)
	if n <= 0 {
		return "", 0, false
	}
	name := string(b[:n])
	off := (n + 4) &^ 3 // NUL, then padding to 4
	if off+4 > len(b) || filepath.Base(name) != name {
		return "", 0, false
	}
	return name, ef.ByteOrder.Uint32(b[off:]), true
}
