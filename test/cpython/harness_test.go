package cpython

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The harness on a module of known outcomes (test/workloads/cpython): every
// kind of outcome is read, a case that fails under heaplens only and an
// environment changed under heaplens only are differences, and a case that
// flips on every run both ways is accepted as flaky.
func TestHarnessJudgesKnownOutcomes(t *testing.T) {
	heaplens := heaplensBin(t)
	s := suite{
		python: "/usr/bin/python3", heaplens: heaplens, timeout: 2 * time.Minute,
		testdir: filepath.Join(root, "test", "workloads", "cpython"),
		env:     []string{"HLFIX_DIR=" + t.TempDir()},
	}
	const m = "test_hlfixture"
	bare, err := s.regrtest(m, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		m + ".Outcomes.test_ok":                      ok,
		m + ".Outcomes.test_fail":                    fail,
		m + ".Outcomes.test_error":                   errored,
		m + ".Outcomes.test_skip":                    skipped,
		m + ".Outcomes.test_xfail":                   xfail,
		m + ".Outcomes.test_subtest":                 fail,
		"setUpClass (" + m + ".BrokenFixture)":       errored,
		m + ".UnderHeaplens.test_differs":            ok,
		m + ".UnderHeaplens.test_flips":              ok,
		m + ".UnderHeaplens.test_alters_environment": ok,
		envCaseID: unaltered,
	}
	for id, o := range want {
		if got := outcome(bare, id); got != o {
			t.Errorf("bare %s: %q, want %q", id, got, o)
		}
	}
	if len(bare.cases) != len(want) {
		t.Errorf("bare run has %d cases, want %d: %v", len(bare.cases), len(want), count(bare))
	}
	if c := bare.cases[m+".Outcomes.test_subtest"]; c == nil || !strings.Contains(c.text, "(i=1)") || !strings.Contains(c.text, "one subtest fails both ways") {
		t.Errorf("the failed subtest's report is missing: %+v", c)
	}

	_, verdicts, err := s.compare(m, "4KiB", bare)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]verdict{}
	for _, v := range verdicts {
		t.Logf("flaky %v: %s", v.flaky, v)
		got[v.id] = v
	}
	for id, flaky := range map[string]bool{
		m + ".UnderHeaplens.test_differs": false,
		m + ".UnderHeaplens.test_flips":   true,
		envCaseID:                         false,
	} {
		v, found := got[id]
		switch {
		case !found:
			t.Errorf("%s: no verdict; verdicts: %v", id, verdicts)
		case v.flaky != flaky:
			t.Errorf("%s: flaky %v, want %v:\n%s", id, v.flaky, flaky, v)
		case len(v.bare) != 1+reruns || len(v.hl) != 1+reruns:
			t.Errorf("%s: %d bare and %d heaplens outcomes, want %d each:\n%s", id, len(v.bare), len(v.hl), 1+reruns, v)
		}
	}
	if len(verdicts) != 3 {
		t.Errorf("%d verdicts, want 3:\n%v", len(verdicts), verdicts)
	}
	if v := got[m+".UnderHeaplens.test_differs"]; !strings.Contains(v.hlText, "fails under heaplens only") {
		t.Errorf("the difference does not show heaplens's failure text:\n%s", v)
	}
	if v := got[envCaseID]; !strings.Contains(v.hlText, "os.environ was modified") {
		t.Errorf("the environment difference does not show regrtest's warning:\n%s", v)
	}
}

// A run that dies has no results: that is one difference, with the end of
// its output.
func TestHarnessReportsACrash(t *testing.T) {
	heaplens := heaplensBin(t)
	s := suite{python: "/usr/bin/python3", heaplens: heaplens, timeout: 2 * time.Minute,
		testdir: filepath.Join(root, "test", "workloads", "cpython")}
	bare, err := s.regrtest("test_hlcrash", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(bare); got != "2 cases: 2 ok; environment unaltered" {
		t.Fatalf("bare: %s, want 2 cases ok\n%s", got, bare.log)
	}
	_, verdicts, err := s.compare("test_hlcrash", "default", bare)
	if err != nil {
		t.Fatal(err)
	}
	if len(verdicts) != 1 || verdicts[0].id != wholeRunID || verdicts[0].flaky {
		t.Fatalf("verdicts %v, want one difference of the whole module", verdicts)
	}
	v := verdicts[0]
	t.Logf("%s", v)
	for _, o := range v.hl {
		if o != "no results (exit 139)" { // 128 + SIGSEGV, as heaplens run reports it
			t.Errorf("heaplens outcome %q, want no results (exit 139):\n%s", o, v)
		}
	}
	if !strings.Contains(v.hlText, "test_b_crashes_under_heaplens") {
		t.Errorf("the difference does not show the end of the dying run's output:\n%s", v)
	}
}
