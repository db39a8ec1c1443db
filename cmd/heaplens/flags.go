package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// newFlags returns a command's flag set whose usage is its synopsis, then
// its flags. Asked for with -h or --help, the usage goes to stdout and the
// command exits 0 (see exitCode); after a bad flag it goes to stderr.
func newFlags(name, synopsis string, args []string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// exitCode is the exit status for a flag parsing error: 0 when help was
// asked for, 2 otherwise.
func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
