package compare

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// jsonInput is the document py_jsontool reads for args (its size in MB).
func (b *bench) jsonInput(args []string) string {
	return filepath.Join(b.tmp, "jsontool-"+args[0]+".json")
}

// jsonOutput is where json.tool writes it back, removed once checked.
func (b *bench) jsonOutput(args []string) string {
	return filepath.Join(b.tmp, "jsontool-"+args[0]+".out")
}

// writeJSON generates py_jsontool's input: args[0] MB (10^6 bytes) of one
// JSON array of records shaped as an API's export (ids, names, nested
// objects, lists of numbers and tags, some escapes), the same bytes every
// time.
func (b *bench) writeJSON(args []string) error {
	mb, err := strconv.Atoi(args[0])
	if err != nil || mb < 1 || mb > 1000 {
		return fmt.Errorf("py_jsontool: bad size %q (MB, 1-1000)", args[0])
	}
	path := b.jsonInput(args)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	cw := &countWriter{w: w}
	want := int64(mb) * 1e6
	cw.str("[")
	for i := 0; cw.n < want; i++ {
		if i > 0 {
			cw.str(",")
		}
		fmt.Fprintf(cw, `{"id": %d, "name": "user%06d", "email": "user%06d@example.com", "active": %t, `, i, i, i, i%3 != 0)
		fmt.Fprintf(cw, `"score": %d.%02d, "address": {"street": "%d Main St", "city": "City %d", "zip": "%05d"}, `, i%1000, i%100, i%500, i%97, i%100000)
		cw.str(`"tags": [`)
		for t := 0; t < i%7; t++ {
			if t > 0 {
				cw.str(", ")
			}
			fmt.Fprintf(cw, `"tag%d"`, (i+t)%50)
		}
		cw.str(`], "history": [`)
		for h := 0; h < 8; h++ {
			if h > 0 {
				cw.str(", ")
			}
			fmt.Fprintf(cw, "%d", (i*31+h*17)%10007)
		}
		fmt.Fprintf(cw, `], "note": "line\nbreak \"quoted\" caf\u00e9 %d"}`, i)
	}
	cw.str("]\n")
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("py_jsontool: writing %s: %w", path, err)
	}
	return f.Close()
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countWriter) str(s string) { c.Write([]byte(s)) }
