package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// parentStacks are stacks written with parents, whole, and their records'
// own Locations: a chain (each the one before with its leaf replaced), a
// parent's Locations all skipped, none skipped, a stack of its parent's
// Locations alone.
func parentStacks() (written []*Stack, own [][]uint64) {
	return []*Stack{
			{ID: 1, Locations: []uint64{11, 12, 13, 14}},
			{ID: 2, Locations: []uint64{15, 12, 13, 14}, Parent: 1, Skip: 1, Inherited: 3},
			{ID: 3, Locations: []uint64{16, 17, 13, 14}, Parent: 2, Skip: 2, Inherited: 2},
			{ID: 4, Locations: []uint64{18, 19}, Parent: 3, Skip: 4, Inherited: 0},
			{ID: 5, Locations: []uint64{20, 16, 17, 13, 14}, Parent: 3, Skip: 0, Inherited: 4},
			{ID: 6, Locations: []uint64{13, 14}, Parent: 5, Skip: 3, Inherited: 2},
		}, [][]uint64{
			{11, 12, 13, 14}, {15}, {16, 17}, {18, 19}, {20}, nil,
		}
}

// writeStacks writes stacks to a capture, seen by obs (if not nil).
func writeStacks(t testing.TB, obs Observer, stacks []*Stack) []byte {
	t.Helper()
	w, buf := testWriter(t, obs)
	for id := uint64(11); id <= 20; id++ {
		if err := w.Location(&Location{ID: id, Address: id}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stacks {
		if err := w.Stack(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A stack written with a parent is its own Locations in the file, and
// whole once loaded: by ReadAll, and by a Skeleton beside the Writer,
// whose other observers see it whole.
func TestStackParents(t *testing.T) {
	stacks, own := parentStacks()
	var seen []*Stack
	skel := NewSkeleton(func(*Record) {})
	file := writeStacks(t, Observers(skel, observerFunc(func(r *Record) {
		if r.Type == RecStack {
			seen = append(seen, r.Stack)
		}
	})), stacks)

	rd, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range stacks {
		rec, err := rd.Next()
		for err == nil && rec.Type == RecLocation {
			rec, err = rd.Next()
		}
		if err != nil {
			t.Fatal(err)
		}
		want := Stack{ID: s.ID, Locations: own[i], Parent: s.Parent, Skip: s.Skip}
		if !reflect.DeepEqual(*rec.Stack, want) {
			t.Errorf("record %d: %+v, want %+v", i, *rec.Stack, want)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Errorf("after the stacks: %v", err)
	}

	loaded, err := ReadAll(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	fromSkel, err := skel.Capture()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Capture{"ReadAll": loaded, "Skeleton": fromSkel} {
		if len(c.Problems) != 0 {
			t.Errorf("%s: problems %q", name, c.Problems)
		}
		for _, s := range stacks {
			if got := c.Stacks[s.ID]; got == nil || !slices.Equal(got.Locations, s.Locations) || got.Parent != 0 {
				t.Errorf("%s: stack %d = %+v, want Locations %v and no parent", name, s.ID, got, s.Locations)
			}
		}
	}
	for i, s := range seen {
		if !slices.Equal(s.Locations, stacks[i].Locations) || s.Parent != 0 {
			t.Errorf("observer saw %+v, want stack %d whole", s, stacks[i].ID)
		}
	}
}

type observerFunc func(*Record)

func (f observerFunc) Observe(r *Record) { f(r) }

// A writer refuses a stack that says it inherits more Locations than it has.
func TestStackParentsWriterChecks(t *testing.T) {
	for _, s := range []*Stack{
		{ID: 2, Locations: []uint64{1}, Parent: 1, Inherited: 2},
		{ID: 2, Locations: []uint64{1}, Parent: 1, Inherited: -1},
		{ID: 2, Locations: []uint64{1}, Inherited: 1},
	} {
		var buf bytes.Buffer
		w, _ := NewWriter(&buf)
		if err := w.Stack(s); err == nil || !strings.Contains(err.Error(), "inherits") {
			t.Errorf("%+v: err %v", s, err)
		}
	}
}

// A reader of version 2 refuses a file that may hold stacks with parents,
// which it would take for their own Locations alone.
func TestStackParentsRefusedByVersion2(t *testing.T) {
	stacks, _ := parentStacks()
	_, err := newReader(bytes.NewReader(writeStacks(t, nil, stacks)), 2)
	if want := "capture format version 3 is newer than this heaplens supports (2)"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

// stackBody is a Stack record's body as a hostile writer may make it.
func stackBody(id uint64, own []uint64, parent, skip uint64) []byte {
	b := binary.AppendUvarint(nil, id)
	b = binary.AppendUvarint(b, uint64(len(own)))
	for _, l := range own {
		b = binary.AppendUvarint(b, l)
	}
	b = binary.AppendUvarint(b, parent)
	return binary.AppendUvarint(b, skip)
}

// A parent that is not a stack read before, a skip past its end, a parent
// itself damaged, a stack too long: each is reported once, and the stack
// keeps its own Locations and ends with a placeholder saying why.
func TestStackParentsDamaged(t *testing.T) {
	long := make([]uint64, MaxStackLocations-10)
	for i := range long {
		long[i] = 11
	}
	parent := rawRecord(RecStack, stackBody(1, []uint64{11, 12, 13}, 0, 0))
	tests := []struct {
		name    string
		payload []byte
		own     []uint64 // stack 2's
		problem string
		label   string
	}{
		{"unknown parent", rawRecord(RecStack, stackBody(2, []uint64{14}, 9, 0)), []uint64{14},
			"1 stacks name an unknown parent stack (e.g. stack 2, parent 9)", "<unknown stack 9>"},
		{"parent later", append(rawRecord(RecStack, stackBody(2, []uint64{14}, 3, 0)), rawRecord(RecStack, stackBody(3, []uint64{11}, 0, 0))...), []uint64{14},
			"1 stacks name an unknown parent stack (e.g. stack 2, parent 3)", "<unknown stack 3>"},
		{"itself", rawRecord(RecStack, stackBody(2, []uint64{14}, 2, 0)), []uint64{14},
			"1 stacks name an unknown parent stack (e.g. stack 2, parent 2)", "<unknown stack 2>"},
		{"skip past the end", rawRecord(RecStack, stackBody(2, []uint64{14}, 1, 4)), []uint64{14},
			"1 stacks skip more locations than their parent has (e.g. stack 2, parent 1)", "<stack 1 has no location 4>"},
		{"damaged parent", append(rawRecord(RecStack, stackBody(3, []uint64{12}, 1, 5)), rawRecord(RecStack, stackBody(2, []uint64{14}, 3, 0))...), []uint64{14},
			"1 stacks name a damaged parent stack (e.g. stack 2, parent 3)", "<damaged stack 3>"},
		{"too long", append(rawRecord(RecStack, stackBody(3, long, 0, 0)), rawRecord(RecStack, stackBody(2, long[:20], 3, 0))...), long[:20],
			fmt.Sprintf("1 stacks are longer than %d locations (e.g. stack 2, parent 3)", MaxStackLocations), "<outer locations of stack 3 cut>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ReadAll(bytes.NewReader(fileOf(Version, append(append([]byte(nil), parent...), tt.payload...))))
			if err != nil {
				t.Fatal(err)
			}
			if problems := parentProblems(c); !slices.Contains(problems, tt.problem) {
				t.Errorf("problems %q, want %q", problems, tt.problem)
			}
			s := c.Stacks[2]
			if s == nil || len(s.Locations) == 0 || s.Parent != 0 {
				t.Fatalf("stack 2: %+v", s)
			}
			last := c.Locations[s.Locations[len(s.Locations)-1]]
			if !slices.Equal(s.Locations[:len(s.Locations)-1], tt.own) || last.Kind != KindMissing || last.Lines[0].Function != tt.label {
				t.Errorf("stack 2: %v ending in %+v, want %v then %q", s.Locations, last, tt.own, tt.label)
			}
			if got := c.Stacks[1].Locations; !slices.Equal(got, []uint64{11, 12, 13}) {
				t.Errorf("the parent: %v", got)
			}
		})
	}
}

// The Locations stacks inherit are bounded by what the file holds.
func TestStackParentsBudget(t *testing.T) {
	defer func(f int) { inheritFloor = f }(inheritFloor)
	inheritFloor = 0
	var payload []byte
	payload = append(payload, rawRecord(RecStack, stackBody(1, []uint64{11, 12, 13, 14, 15, 16, 17, 18}, 0, 0))...)
	const n = 100 // each inherits 8 Locations for 2 words: within 64 a word
	for id := uint64(2); id < n; id++ {
		payload = append(payload, rawRecord(RecStack, stackBody(id, nil, 1, 0))...)
	}
	c, err := ReadAll(bytes.NewReader(fileOf(Version, payload)))
	if problems := parentProblems(c); err != nil || len(problems) != 0 || len(c.Stacks[n-1].Locations) != 8 {
		t.Fatalf("within the budget: %v, problems %q, stack %d %v", err, problems, n-1, c.Stacks[n-1])
	}
	// Each inherits all of the one before: stack k holds k Locations, and
	// past the 257th the chain holds more than 64 for each of its 2 words.
	payload = rawRecord(RecStack, stackBody(1, []uint64{11}, 0, 0))
	for id := uint64(2); id < 4*n; id++ {
		payload = append(payload, rawRecord(RecStack, stackBody(id, []uint64{11}, id-1, 0))...)
	}
	c, err = ReadAll(bytes.NewReader(fileOf(Version, payload)))
	want := "stacks inherit more locations from their parents than the capture can hold"
	over := func(p string) bool { return strings.HasPrefix(p, "1 "+want+" (e.g. stack 258, parent 257)") }
	if problems := parentProblems(c); err != nil || !slices.ContainsFunc(problems, over) {
		t.Fatalf("over the budget: %v, problems %q, want %q", err, problems, want)
	}
}

// parentProblems are c's problems but those of Locations these tests do
// not write.
func parentProblems(c *Capture) []string {
	var out []string
	for _, p := range c.Problems {
		if !strings.Contains(p, "unknown location") {
			out = append(out, p)
		}
	}
	return out
}
