package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// LoadEvents reads the capture file at path as Load does, except that it
// hands each Alloc and Free record to event, in file order, instead of
// keeping it: the Capture it returns has no Allocs, Frees or FreeOrder, and
// takes memory in proportion to the run's stacks rather than its samples.
// A replay then reads the events again with ScanEvents (heap.Summarize).
// The Record event gets is reused by the next call.
func LoadEvents(path string, event func(*Record)) (*Capture, error) { return loadFile(path, event) }

// A Skeleton keeps, as a Writer writes a capture (it is its Observer),
// what LoadEvents would read back: every record but the events, which go
// to a function. The summary of a run then reads the capture once instead
// of twice. Records other than events are decoded from the bytes written,
// so that they are what a reader gets (names shortened alike); a write
// that failed leaves the Skeleton ahead of the file, and the caller must
// then load the file instead.
type Skeleton struct {
	a   *assembler
	rd  Reader // decodes the bodies written
	err error  // the first the assembler or a decoding returned
}

// NewSkeleton returns a Skeleton handing the events to event.
func NewSkeleton(event func(*Record)) *Skeleton {
	return &Skeleton{a: newAssembler(event)}
}

// Observe is how anything but a Writer, which hands the bodies too
// (observeBody), would feed a Skeleton: without the bytes written it
// cannot know what a reader gets, so Capture then refuses.
func (s *Skeleton) Observe(*Record) {
	if s.err == nil {
		s.err = errors.New("capture: a Skeleton must observe a Writer")
	}
}

func (s *Skeleton) observeBody(r *Record, body []byte) {
	if s.err != nil {
		return
	}
	if r.Type != RecAlloc && r.Type != RecFree { // events decode to what was written; the others may not (shortened names)
		if r, s.err = s.rd.decode(r.Type, body); s.err != nil || r == nil {
			return // r: nil for a type readers skip; Writers write none
		}
	}
	s.err = s.a.add(r)
}

// Capture returns the capture without its events, resolved as LoadEvents
// returns it, or why it is not whole; once, after the Writer is closed.
func (s *Skeleton) Capture() (*Capture, error) {
	if s.err != nil {
		return nil, s.err
	}
	c := s.a.c
	c.Shortened = s.rd.shortened
	c.Resolve()
	return c, nil
}

// eventNamed notes the stack and stream an event names, for Check.
func (c *Capture) eventNamed(rec *Record) {
	switch rec.Type {
	case RecAlloc:
		// Most allocations name one of a few stacks: remember those seen.
		id := rec.Alloc.StackID
		if k := &c.eventKnown[id%uint64(len(c.eventKnown))]; *k != id {
			if id != 0 && c.Stacks[id] == nil {
				c.eventStacks[id] = true // it may still come: Check looks again
			} else {
				*k = id
			}
		}
		c.noteStream(rec.Alloc.Stream)
	case RecFree:
		c.noteStream(rec.Free.Stream)
	}
}

// noteStream notes a stream an event names.
func (c *Capture) noteStream(s uint32) {
	if s != c.eventStream || len(c.eventStreams) == 0 {
		c.eventStreams[s] = true
		c.eventStream = s
	}
}

// ScanEvents reads the Alloc and Free records of the capture file at path
// in file order and hands each to fn, until fn returns false, the file
// ends, or n records were read: a damaged file is read to where LoadEvents
// stopped, and its damage is not reported again. The Record fn gets is
// reused by the next call.
func ScanEvents(path string, n int, fn func(*Record) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	defer f.Close()
	rd, err := NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return pathError(path, err)
	}
	rd.ReadAhead()
	defer rd.Close()
	for read := 0; read < n; {
		rec, err := rd.Next()
		if err == io.EOF {
			return fmt.Errorf("%s: the capture ended after %d of its %d allocations and frees: it changed while it was read", path, read, n)
		}
		if err != nil {
			return pathError(path, err)
		}
		if rec.Type != RecAlloc && rec.Type != RecFree {
			continue
		}
		read++
		if !fn(rec) {
			return nil
		}
	}
	return nil
}

// pathError names the capture in an error from reading it.
func pathError(path string, err error) error {
	if ce, ok := err.(*CorruptError); ok {
		ce.Path = path
		return ce
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
