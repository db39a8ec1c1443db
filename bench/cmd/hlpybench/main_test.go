package main

// These tests cover the harness's pure helpers only. Nothing here times
// anything: speed goals are measured by the harness, never asserted in a
// timed test on a shared, noisy machine.

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/bench/internal/harness"
)

func TestResultLine(t *testing.T) {
	out := "checksum=12 loop_s=1.5 maxrss_kb=4000\n[memray] Successfully generated profile results.\n\n"
	line := resultLine(out, "checksum")
	kv := harness.ParseKV(line)
	if kv["loop_s"] != 1.5 || kv["maxrss_kb"] != 4000 {
		t.Errorf("harness.ParseKV(%q) = %v", line, kv)
	}
	if got := rawValue("checksum=1.573857e+07 loop_s=2", "checksum"); got != "1.573857e+07" {
		t.Errorf("rawValue = %q", got)
	}
	if resultLine("nothing here\n", "checksum") != "" {
		t.Error("resultLine found a missing key")
	}
	// A key that only prefixes another word does not match.
	if resultLine("checksums=3\n", "checksum") != "" {
		t.Error("resultLine matched a longer key")
	}
}

func TestHeaviestStackAndCount(t *testing.T) {
	folded := strings.Join([]string{
		"[9 python];_start (python3.11);Py_RunMain (python3.11);__fopen_internal (iofopen.c:65) 472",
		"[9 python];_start (python3.11);PyEval_EvalCode (python3.11);<module> (/w/py_deep.py:57);main (/w/py_deep.py:52);" +
			"_PyObject_MakeTpCall (python3.11);0x547bb7 (python3.11);_PyFunction_Vectorcall (python3.11);" +
			"step (/w/py_deep.py:38);level (/w/py_deep.py:43);measure (/w/py_deep.py:31);0x5064f3 (python3.11) 2048000",
		"",
	}, "\n")
	stack, w := heaviestStack(folded)
	if w != 2048000 || !strings.HasPrefix(stack, "_start") {
		t.Fatalf("heaviestStack = %q, %d", stack, w)
	}
	// Native shown: _start, PyEval_EvalCode, 3 helpers, 0x5064f3 = 6, plus
	// one eval frame for each of the two runs of Python frames.
	native, python := countStack(stack)
	if native != 8 || python != 5 {
		t.Errorf("countStack = %d native, %d Python; want 8, 5", native, python)
	}
}

func TestChecksumMismatch(t *testing.T) {
	same := [][]Measurement{{{Checksum: "7"}, {Checksum: "7"}}, {{Checksum: "7"}}}
	if got := checksumMismatch(same); got != "" {
		t.Errorf("equal checksums reported as %q", got)
	}
	diff := [][]Measurement{{{Checksum: "7"}}, {{Checksum: "8"}, {Checksum: "7"}}}
	if got := checksumMismatch(diff); got != "7, 8" {
		t.Errorf("checksumMismatch = %q, want \"7, 8\"", got)
	}
}

func TestWarnDedup(t *testing.T) {
	b := &bench{}
	b.warn("memray: Correcting symbol for malloc from 0x41f610 to 0x7ff24e8d3930")
	b.warn("memray: Correcting symbol for malloc from 0x41f610 to 0x7f6394156930")
	if len(b.warnings) != 1 {
		t.Errorf("warnings = %q", b.warnings)
	}
}

func TestHelpers(t *testing.T) {
	if got := lastLines("a\n\n b \nc\n", 2); got != "b / c" {
		t.Errorf("lastLines = %q", got)
	}
	for n, want := range map[float64]string{512: "512 B", 2048: "2.0 KiB", 3 << 20: "3.0 MiB"} {
		if got := byteLabel(n); got != want {
			t.Errorf("byteLabel(%v) = %q, want %q", n, got, want)
		}
	}
	env := strings.Join(cleanEnv(nil), "\n")
	if !strings.Contains(env, "PYTHONHASHSEED=0") || strings.Contains(env, "LD_PRELOAD=") {
		t.Errorf("cleanEnv lacks PYTHONHASHSEED or keeps LD_PRELOAD")
	}
}

func TestJSONFinite(t *testing.T) {
	c := ConfigResult{Config: "memray", WallRatio: math.NaN(), CPURatio: math.Inf(1)}
	if _, err := json.Marshal(Report{Workloads: []WorkloadResult{{Configs: []ConfigResult{c}}},
		Samples: []SampleResult{{PerSampleUs: math.NaN()}}}); err != nil {
		t.Errorf("NaN or Inf reached the JSON: %v", err)
	}
}
