package e2e

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/heap"
)

// The diffsites workload's sites (test/workloads/diffsites.c); only
// scaled_keep depends on the argument F: F*256 blocks of 64 KiB.
const (
	scaledN, scaledSz = 256, 64 << 10
	diffRate          = 64 << 10
)

// diffDoc is the part of heaplens diff's JSON (docs/diff.md) the tests read.
type diffDoc struct {
	Views []struct {
		View  string
		Z     float64
		Sites []struct {
			Change      string
			DeltaBytes  float64 `json:"delta_bytes"`
			DeltaMargin float64 `json:"delta_margin"`
			Frames      []string
		}
	}
}

func leafFunc(frames []string) string {
	if len(frames) == 0 {
		return ""
	}
	name, _, _ := strings.Cut(frames[0], " (")
	return name
}

func diffJSON(t *testing.T, base, next string, extra ...string) diffDoc {
	t.Helper()
	res := run(t, 2*time.Minute, heaplensBin(t), append([]string{"diff", base, next, "--format", "json"}, extra...)...)
	if res.code != 0 {
		t.Fatalf("heaplens diff: exit %d\n%s", res.code, res.stderr)
	}
	var d diffDoc
	if err := json.Unmarshal([]byte(res.stdout), &d); err != nil {
		t.Fatalf("diff JSON: %v\n%s", err, res.stdout)
	}
	return d
}

func diffRun(t *testing.T, dir, bin, name, seed, f string, extra ...string) string {
	t.Helper()
	out := filepath.Join(dir, name+".hlc")
	args := append([]string{"run", "-q", "-o", out, "--seed", seed}, extra...)
	res := run(t, 2*time.Minute, heaplensBin(t), append(args, "--", bin, f)...)
	if res.code != 0 {
		t.Fatalf("heaplens run %s: exit %d\n%s", name, res.code, res.stderr)
	}
	return out
}

// One site doubles between two runs: that site, and no other, is reported as
// grown in every view, by about the bytes it really grew; two runs of the
// same program report nothing; --fail-over decides the exit status.
func TestDiffOneSiteDoubles(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "diffsites.c")
	rate := []string{"--rate", "64KiB"}
	base := diffRun(t, dir, bin, "base", "1", "1", rate...)
	grown := diffRun(t, dir, bin, "grown", "2", "2", rate...)
	same := diffRun(t, dir, bin, "same", "3", "1", rate...)

	// What the delta may deviate from the truth by: the sampling deviation
	// of both runs' estimates of scaled_keep, at 4σ.
	sd := math.Hypot(heap.Stddev(map[uint64]int{scaledSz: scaledN}, diffRate), heap.Stddev(map[uint64]int{scaledSz: 2 * scaledN}, diffRate))
	want := float64(scaledN * scaledSz)
	d := diffJSON(t, base, grown)
	if len(d.Views) != 3 {
		t.Fatalf("default views: got %d, want allocs, peak, leaks", len(d.Views))
	}
	for _, v := range d.Views {
		var flagged []string
		found := false
		for _, s := range v.Sites {
			fn := leafFunc(s.Frames)
			if s.Change != "same" {
				flagged = append(flagged, s.Change+" "+fn)
			}
			if fn == "scaled_keep" {
				found = true
				if math.Abs(s.DeltaBytes-want) > 4*sd {
					t.Errorf("%s: scaled_keep grew by %.0f bytes, want %.0f ± %.0f (4σ)", v.View, s.DeltaBytes, want, 4*sd)
				}
			}
		}
		if !found {
			t.Errorf("%s: no scaled_keep site", v.View)
		}
		if len(flagged) != 1 || flagged[0] != "grown scaled_keep" {
			t.Errorf("%s: flagged %v, want exactly [grown scaled_keep]", v.View, flagged)
		}
	}
	for _, v := range diffJSON(t, base, same).Views {
		for _, s := range v.Sites {
			if s.Change != "same" {
				t.Errorf("%s: two runs of one program: %s %s by %.0f ± %.0f", v.View, leafFunc(s.Frames), s.Change, s.DeltaBytes, s.DeltaMargin)
			}
		}
	}

	// --fail-over: the growth is 16 MiB, so 4 MiB fails and 64 MiB passes.
	res := run(t, time.Minute, heaplensBin(t), "diff", base, grown, "--fail-over", "4MiB")
	if res.code != 3 || !strings.Contains(res.stderr, "scaled_keep") {
		t.Errorf("--fail-over 4MiB: exit %d, want 3 naming scaled_keep\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stdout, "grown: 1 site") {
		t.Errorf("text report does not say one site grew:\n%s", res.stdout)
	}
	if res := run(t, time.Minute, heaplensBin(t), "diff", base, grown, "--fail-over", "64MiB"); res.code != 0 {
		t.Errorf("--fail-over 64MiB: exit %d, want 0\n%s", res.code, res.stderr)
	}
	if res := run(t, time.Minute, heaplensBin(t), "diff", base, same, "--fail-over", "0"); res.code != 0 {
		t.Errorf("same program, --fail-over 0: exit %d, want 0\n%s", res.code, res.stderr)
	}

	// pprof: NEW minus BASE as -diff_base computes it; inuse_space of
	// scaled_keep is its growth.
	pb := filepath.Join(dir, "diff.pb.gz")
	if res := run(t, time.Minute, heaplensBin(t), "diff", base, grown, "--format", "pprof", "-o", pb); res.code != 0 {
		t.Fatalf("diff --format pprof: exit %d\n%s", res.code, res.stderr)
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := pprofile.Parse(f)
	if err != nil {
		t.Fatalf("parsing the diff profile: %v", err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	var got float64
	negative := false
	for _, s := range p.Sample {
		if s.Label["pprof::base"] != nil {
			negative = negative || s.Value[idx] < 0
		}
		if ln := s.Location[0].Line; len(ln) > 0 && ln[0].Function.Name == "scaled_keep" {
			got += float64(s.Value[idx])
		}
	}
	if !negative {
		t.Error("no negated sample labelled pprof::base in the diff profile")
	}
	if math.Abs(got-want) > 4*sd {
		t.Errorf("pprof inuse_space of scaled_keep: %.0f, want %.0f ± %.0f", got, want, 4*sd)
	}
}

// At --rate 1 the difference is exact: scaled_keep grew by exactly 16 MiB
// allocated, and no other site changed at all.
func TestDiffExact(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "diffsites.c")
	base := diffRun(t, dir, bin, "base", "1", "1", "--rate", "1")
	grown := diffRun(t, dir, bin, "grown", "1", "2", "--rate", "1")
	for _, v := range diffJSON(t, base, grown, "--view", "allocs,leaks").Views {
		for _, s := range v.Sites {
			fn := leafFunc(s.Frames)
			switch {
			case fn == "scaled_keep" && (s.DeltaBytes != scaledN*scaledSz || s.Change != "grown"):
				t.Errorf("%s: scaled_keep %s by %.0f, want grown by exactly %d", v.View, s.Change, s.DeltaBytes, scaledN*scaledSz)
			case strings.HasPrefix(fn, "steady_") && s.DeltaBytes != 0:
				t.Errorf("%s: %s changed by %.0f bytes at rate 1", v.View, fn, s.DeltaBytes)
			}
			if s.DeltaMargin != 0 {
				t.Errorf("%s: %s has a margin of %.0f at rate 1", v.View, fn, s.DeltaMargin)
			}
		}
	}
}

func TestDiffBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.hlc")
	if err := os.WriteFile(junk, []byte("not a capture"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"diff", junk}, 2, "name two capture files"},
		{[]string{"diff", junk, filepath.Join(dir, "missing.hlc")}, 1, "heaplens diff:"},
		{[]string{"diff", junk, junk, "--view", "live"}, 2, "unknown view"},
		{[]string{"diff", junk, junk, "--format", "html"}, 2, "unknown format"},
		{[]string{"diff", junk, junk, "--format", "pprof", "--view", "allocs,leaks"}, 2, "one --view"},
		{[]string{"diff", junk, junk, "-o", junk}, 2, "overwrite"},
		{[]string{"diff", junk, junk, "--fail-over", "lots"}, 2, "fail-over"},
	} {
		res := run(t, time.Minute, heaplensBin(t), tc.args...)
		if res.code != tc.code || !strings.Contains(res.stderr, tc.msg) {
			t.Errorf("heaplens %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args[1:], res.code, res.stderr, tc.code, tc.msg)
		}
	}
}
