package capture

import (
	"bufio"
	"fmt"
	"io"
)

// Dump writes the records of a capture stream in file order, one per line,
// for people: to debug a capture or to read a test fixture (as pprof's
// Profile.String or memray parse). It starts with the format version and
// ends with what the reader skipped; on damage it writes every record read
// before it, then returns the *CorruptError.
func Dump(w io.Writer, r io.Reader) error {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	rd, err := NewReader(r)
	if err != nil {
		return err
	}
	fmt.Fprintf(bw, "heaplens capture, format version %d\n", rd.Version())
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(bw, "# %v\n", err)
			return err
		}
		fmt.Fprintf(bw, "%-8s %s\n", rec.Type, rec.body().dump())
	}
	fmt.Fprintf(bw, "# %d chunks, %d records of unknown types skipped, %d long names cut\n", rd.ChunksRead(), rd.Skipped(), rd.Shortened())
	return nil
}
