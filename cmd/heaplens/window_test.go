package main

import (
	"strings"
	"testing"
)

// FuzzReadWindows: heaplens window's input is untrusted; any input gives
// windows that make sense or an error, never a panic.
func FuzzReadWindows(f *testing.F) {
	f.Add(`{"name":"t","pid":1,"from":1,"until":2}` + "\n")
	f.Add(`{"name":"t","pid":-1,"from":3,"until":2}`)
	f.Add("\n\n{}\n")
	f.Fuzz(func(t *testing.T, in string) {
		specs, err := readWindows(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, s := range specs {
			if s.PID <= 0 || s.Until < s.From {
				t.Errorf("accepted %+v", s)
			}
		}
	})
}

func TestParseMark(t *testing.T) {
	for in, ok := range map[string]bool{"12:3": true, "12:18446744073709551615": true, "0:1": false, "x:1": false, "12": false, "12:-1": false} {
		if _, _, err := parseMark(in); (err == nil) != ok {
			t.Errorf("parseMark(%q): %v", in, err)
		}
	}
}
