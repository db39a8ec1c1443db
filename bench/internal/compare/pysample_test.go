package compare

// These tests cover the harness's pure helpers only. Nothing here times
// anything: speed goals are measured by the harness, never asserted in a
// timed test on a shared, noisy machine.

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

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

func TestJSONFinite(t *testing.T) {
	if _, err := json.Marshal(PyReport{Samples: []SampleResult{{PerSampleUs: math.NaN(), WallUs: math.Inf(1)}}}); err != nil {
		t.Errorf("NaN or Inf reached the JSON: %v", err)
	}
}
