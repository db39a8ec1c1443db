package symbolize

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sort"

	"github.com/heaplens/heaplens/internal/cachedir"
	"github.com/heaplens/heaplens/internal/capture"
)

// The symbol cache keeps Lookup results across runs, one file per ELF file
// with DWARF, so that a program run again under heaplens does not inflate
// and index the same debug info again (for glibc's separate debug file that
// is most of the agent's CPU time in a short run). It is an optimisation
// only: any file that is missing, unreadable, corrupt, of another format
// version or for other inputs is ignored and rewritten.
//
// A file is named after the build ID of the ELF file and a hash of its key,
// which covers everything a result depends on: the format and
// resultsVersion, the build ID, and the path, size and modification time of
// the file the DWARF comes from (the binary itself, or its separate debug
// file, which can be installed or updated under the same build ID).
//
// Layout (little endian; uvarint = encoding/binary's):
//
//	magic   "HLSYMC\x00\x01"
//	key     uvarint length, bytes
//	strings uvarint count; each uvarint length, bytes
//	entries uvarint count; each: vaddr delta from the previous entry
//	        (uvarint, entries sorted by vaddr), uvarint number of lines,
//	        per line: function and file as string indices, line (uvarint)
//	crc     CRC-32C of everything before, 4 bytes
//
// Files are replaced atomically (written to a temporary file in the same
// directory, then renamed), so a reader sees a whole old or a whole new
// file; two agents saving at once lose only each other's new entries.

// cacheMagic starts every cache file; its last byte is the format version.
const cacheMagic = "HLSYMC\x00\x01"

// resultsVersion must change whenever Lookup's results for the same inputs
// change (a fix in DWARF decoding, demangling, inline expansion…): it is
// part of the key, so results of an older symbolizer are not reused.
const resultsVersion = 1

// Limits: a cache file is small (a few hundred pcs per module per run);
// anything beyond these is corrupt or not worth keeping.
const (
	maxCacheFile    = 64 << 20
	maxCacheEntries = 200_000
	maxCacheString  = 1 << 16
	maxCacheLines   = maxDepth
	maxCacheFiles   = 256 // files kept in the directory; the least recently used go first
)

// CacheEnv names the environment variable that overrides DefaultCacheDir:
// "off" (or "0") disables the symbol cache, any other value is its directory.
const CacheEnv = "HEAPLENS_SYMBOL_CACHE"

// DefaultCacheDir is the symbol cache directory NewCache uses:
// $HEAPLENS_SYMBOL_CACHE, else heaplens/symbols in the user cache directory
// (os.UserCacheDir), or "" (no cache) when neither is available or the
// home it is in does not exist.
func DefaultCacheDir() string { return cachedir.Dir(CacheEnv, "symbols") }

// diskFile is the cache of one File.
type diskFile struct {
	path    string
	key     string
	loaded  bool
	entries map[uint64][]capture.Line
	added   int // entries not on disk yet
	hits    int
}

// newDiskFile returns the cache of f in dir, or nil when f cannot be
// cached: no build ID (nothing stable to key it by) or no DWARF (the symbol
// table alone is cheap to read again).
func newDiskFile(dir string, f *File) *diskFile {
	if dir == "" || f.dwFile == nil || !cachedir.ValidName(f.buildID) {
		return nil
	}
	st, err := f.dwFile.Stat()
	if err != nil {
		return nil
	}
	src, err := filepath.Abs(f.dwFile.Name())
	if err != nil {
		return nil
	}
	key := fmt.Sprintf("heaplens-symbols %d\x00build-id %s\x00dwarf %s %d %d", resultsVersion, f.buildID, src, st.Size(), st.ModTime().UnixNano())
	sum := sha256.Sum256([]byte(key))
	return &diskFile{
		path: filepath.Join(dir, f.buildID+"-"+hex.EncodeToString(sum[:8])+".syms"),
		key:  key,
	}
}

// get returns a copy of the cached frames at vaddr (nil frames are a valid
// entry: nothing is known there). The file is read on first use.
func (d *diskFile) get(vaddr uint64) ([]capture.Line, bool) {
	if !d.loaded {
		d.loaded = true
		d.entries = readCacheFile(d.path, d.key)
	}
	lines, ok := d.entries[vaddr]
	if !ok {
		return nil, false
	}
	d.hits++
	if lines == nil {
		return nil, true
	}
	return append([]capture.Line(nil), lines...), true
}

// put remembers a result computed from DWARF.
func (d *diskFile) put(vaddr uint64, lines []capture.Line) {
	if d.entries == nil {
		d.entries = make(map[uint64][]capture.Line)
	}
	if _, ok := d.entries[vaddr]; ok || len(d.entries) >= maxCacheEntries || len(lines) > maxCacheLines {
		return
	}
	d.entries[vaddr] = append([]capture.Line(nil), lines...)
	d.added++
}

// save writes the entries, merged with what another process may have saved
// meanwhile, when there are new ones; a file that only served hits is
// touched so that pruning keeps it. Errors are ignored: the cache is an
// optimisation.
func (d *diskFile) save() {
	if d.added == 0 {
		if d.hits > 0 {
			cachedir.Touch(d.path)
		}
		return
	}
	for va, lines := range readCacheFile(d.path, d.key) {
		if _, ok := d.entries[va]; !ok && len(d.entries) < maxCacheEntries {
			d.entries[va] = lines
		}
	}
	if err := cachedir.Write(d.path, encodeCache(d.key, d.entries)); err != nil {
		return
	}
	d.added = 0
	cachedir.Prune(filepath.Dir(d.path), ".syms", maxCacheFiles)
}

// readCacheFile returns the entries of the cache file at path, or nil when
// it is missing or not a valid file for key.
func readCacheFile(path, key string) map[uint64][]capture.Line {
	data, ok := cachedir.Read(path, maxCacheFile)
	if !ok {
		return nil
	}
	entries, err := decodeCache(data, key)
	if err != nil {
		return nil
	}
	return entries
}

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// encodeCache serialises entries for key (see the layout above).
func encodeCache(key string, entries map[uint64][]capture.Line) []byte {
	vaddrs := make([]uint64, 0, len(entries))
	for va := range entries {
		vaddrs = append(vaddrs, va)
	}
	sort.Slice(vaddrs, func(i, j int) bool { return vaddrs[i] < vaddrs[j] })
	index := map[string]uint64{}
	var strs []string
	intern := func(s string) uint64 {
		i, ok := index[s]
		if !ok {
			i = uint64(len(strs))
			index[s] = i
			strs = append(strs, s)
		}
		return i
	}
	var body []byte
	prev := uint64(0)
	for _, va := range vaddrs {
		lines := entries[va]
		body = binary.AppendUvarint(body, va-prev)
		prev = va
		body = binary.AppendUvarint(body, uint64(len(lines)))
		for _, l := range lines {
			body = binary.AppendUvarint(body, intern(l.Function))
			body = binary.AppendUvarint(body, intern(l.File))
			body = binary.AppendUvarint(body, uint64(max(l.Line, 0)))
		}
	}
	out := []byte(cacheMagic)
	out = appendString(out, key)
	out = binary.AppendUvarint(out, uint64(len(strs)))
	for _, s := range strs {
		out = appendString(out, s)
	}
	out = binary.AppendUvarint(out, uint64(len(vaddrs)))
	out = append(out, body...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoliTable))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errCache = errors.New("symbolize: invalid symbol cache file")

// decodeCache parses a cache file; any inconsistency is an error, never a
// panic.
func decodeCache(data []byte, key string) (map[uint64][]capture.Line, error) {
	if len(data) < len(cacheMagic)+4 || !bytes.Equal(data[:len(cacheMagic)], []byte(cacheMagic)) {
		return nil, errCache
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoliTable) != sum {
		return nil, errCache
	}
	r := cacheReader{b: body[len(cacheMagic):]}
	if k := r.string(); r.err != nil || k != key {
		return nil, errCache
	}
	n := r.count(1)
	strs := make([]string, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		strs = append(strs, r.string())
	}
	str := func() string {
		i := r.uvarint()
		if i >= uint64(len(strs)) {
			r.err = errCache
			return ""
		}
		return strs[i]
	}
	n = r.count(2)
	if n > maxCacheEntries {
		return nil, errCache
	}
	entries := make(map[uint64][]capture.Line, n)
	va := uint64(0)
	for i := uint64(0); i < n && r.err == nil; i++ {
		va += r.uvarint()
		nl := r.count(3)
		if nl > maxCacheLines {
			return nil, errCache
		}
		var lines []capture.Line
		for j := uint64(0); j < nl && r.err == nil; j++ {
			fn, file, line := str(), str(), r.uvarint()
			if line > 1<<31 {
				r.err = errCache
			}
			lines = append(lines, capture.Line{Function: fn, File: file, Line: int(line)})
		}
		entries[va] = lines
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, errCache
	}
	return entries, nil
}

// cacheReader decodes uvarints and strings, remembering the first error.
type cacheReader struct {
	b   []byte
	err error
}

func (r *cacheReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCache
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least minSize bytes each, rejecting
// one the remaining bytes cannot hold (so a corrupt count allocates nothing).
func (r *cacheReader) count(minSize uint64) uint64 {
	n := r.uvarint()
	if n > uint64(len(r.b))/minSize {
		r.err = errCache
		return 0
	}
	return n
}

func (r *cacheReader) string() string {
	n := r.uvarint()
	if r.err != nil || n > maxCacheString || n > uint64(len(r.b)) {
		r.err = errCache
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
