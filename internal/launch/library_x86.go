//go:build !arm64

package launch

import (
	"embed"
	"io/fs"
)

// The Makefile builds preload/ into lib/libheaplens.so before the Go build.
// The directory is embedded (it always holds its README), so that a fresh
// clone vets, tests and builds with plain Go tools; such a binary has no
// library, and says so when asked to profile.
//
//go:embed lib
var libDir embed.FS

var (
	library, _            = fs.ReadFile(libDir, "lib/libheaplens.so")
	attachLibraryBytes, _ = fs.ReadFile(libDir, "lib/libheaplens-attach.so")
)
