package launch

import (
	"embed"
	"io/fs"
)

// The arm64 build of preload/ (make bin/heaplens-arm64, with Debian's
// aarch64-linux-gnu-gcc) is lib-arm64/libheaplens.so, embedded as lib's is
// on x86-64. There is no attach library: attach is x86-64 only.
//
//go:embed lib-arm64
var libDir embed.FS

var (
	library, _         = fs.ReadFile(libDir, "lib-arm64/libheaplens.so")
	attachLibraryBytes []byte
)
