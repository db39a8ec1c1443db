package unwind

import (
	"bytes"
	"debug/elf"
	"testing"
)

// smallLib is a real library with a small .eh_frame.
const smallLib = "/lib/x86_64-linux-gnu/librt.so.1"

// Any .eh_frame section, at any address: Build never panics, and what it
// writes Parse accepts.
func FuzzBuild(f *testing.F) {
	for _, tc := range cfiCases {
		var e eh
		tc.build(&e)
		f.Add(e.b, uint64(testEHAddr), true)
	}
	// librt's .eh_frame, and the start of libc's, cut at an entry.
	if lf, err := elf.Open(smallLib); err == nil {
		if s := lf.Section(".eh_frame"); s != nil {
			if data, err := s.Data(); err == nil {
				f.Add(data, s.Addr, true)
			}
		}
		lf.Close()
	}
	if lf, err := elf.Open(oracleFiles[0]); err == nil {
		if s := lf.Section(".eh_frame"); s != nil {
			if data, err := s.Data(); err == nil {
				x := &ehFrame{data: data}
				off := 0
				for off < 4096 {
					e, done, err := x.next(off)
					if done || err != nil {
						break
					}
					off = e.end
				}
				f.Add(data[:off], s.Addr, true)
			}
		}
		lf.Close()
	}
	f.Fuzz(func(t *testing.T, section []byte, addr uint64, hdr bool) {
		hdrAddr := uint64(0)
		if hdr {
			hdrAddr = testHdrAddr
		}
		ef, err := elf.NewFile(bytes.NewReader(testELF(section, addr, testID, hdrAddr)))
		if err != nil {
			t.Fatalf("the test's ELF file: %v", err)
		}
		b, err := Build(ef)
		if err != nil {
			return
		}
		if _, err := Parse(b); err != nil {
			t.Fatalf("Build wrote a table Parse refuses: %v", err)
		}
	})
}

// Any bytes: Parse never panics, and a table it accepts is the bytes it
// read and answers Lookup at each of its rows.
func FuzzParse(f *testing.F) {
	// Real tables: librt's, and the first rows of libc's (the whole of it
	// makes each run slow), and their truncations.
	var real [][]byte
	if b, _, err := BuildFile(smallLib); err == nil {
		real = append(real, b)
	}
	if b, _, err := BuildFile(oracleFiles[0]); err == nil {
		if tab, err := Parse(b); err == nil {
			tab.Addr, tab.Rule = tab.Addr[:64], append(tab.Rule[:63], unknown)
			real = append(real, tab.bytes())
		}
	}
	for _, b := range real {
		f.Add(b)
		for _, n := range []int{0, headerSize - 1, headerSize, headerSize + 4, headerSize + 8, headerSize + 16, len(b) - 8, len(b) - 1} {
			f.Add(b[:n])
		}
	}
	var e eh
	cfiCases[1].build(&e)
	if c, err := compile(openTestELF(f, testELF(e.b, testEHAddr, testID, 0))); err == nil {
		f.Add(c.table.bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := Parse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(tab.bytes(), b) {
			t.Fatal("Parse accepted a table that does not encode back to its bytes")
		}
		n := len(tab.Addr)
		for i := range n - 1 {
			if got, ok := tab.Lookup(tab.Base + uint64(tab.Addr[i])); !ok || got != DecodeRule(tab.Rule[i]) {
				t.Fatalf("Lookup at row %d: %v, %v", i, got, ok)
			}
		}
		if _, ok := tab.Lookup(tab.Base + uint64(tab.Addr[n-1])); ok {
			t.Fatal("Lookup found a rule at the last row")
		}
	})
}
