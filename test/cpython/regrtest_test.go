// Package cpython runs a slice of CPython's own regression tests bare and
// under `heaplens run`, and requires the same outcome for every test case:
// heaplens must not change what the program it profiles does.
package cpython

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/heaplens/heaplens/test/testenv"
)

// Outcomes of one test case, as unittest names them. "missing" is a case
// that one run reported and the other did not.
const (
	ok         = "ok"
	fail       = "FAIL"
	errored    = "ERROR"
	skipped    = "skipped"
	xfail      = "expected failure"
	xpass      = "unexpected success"
	missing    = "missing"
	altered    = "altered"
	unaltered  = "unaltered"
	envCaseID  = "(environment)" // regrtest's "Warning -- …": the module left threads, children, files behind
	wholeRunID = "(module)"      // stands for every case when a run produced no results at all
)

// run is one `python -m test MODULE` process and what it reported.
type run struct {
	argv    []string
	code    int
	elapsed time.Duration
	log     string            // stdout and stderr
	cases   map[string]*tcase // by test id: test.test_gc.GCTests.test_boom
}

type tcase struct {
	outcome string
	text    string // traceback, skip reason or warnings
}

// suite is an interpreter's regression tests, and how to run them.
type suite struct {
	python, heaplens string
	minor            int      // CPython 3.minor
	testdir          string   // regrtest --testdir; "" for CPython's own
	env              []string // added to the environment
	timeout          time.Duration
	root             *testenv.Chroot // run inside this root (python and heaplens are paths there); nil: the host
}

// command is argv (paths as the runner sees them) run in dir, on the host
// or inside s.root.
func (s suite) command(ctx context.Context, dir string, argv ...string) *exec.Cmd {
	if s.root == nil {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = dir
		return cmd
	}
	return s.root.Command(ctx, append([]string{"sh", "-c", `cd "$0" && exec "$@"`, s.root.Inside(dir)}, argv...)...)
}

// inside is a host path under the scratch directory as the runner sees it.
func (s suite) inside(host string) string {
	if s.root == nil {
		return host
	}
	return s.root.Inside(host)
}

// regrtest runs one module bare (rate "") or under heaplens at a rate ("default"
// for heaplens's own), restricted to the given test ids if any, in its own
// directory and process group, and parses its results.
func (s suite) regrtest(module, rate string, ids []string) (*run, error) {
	tmp := ""
	if s.root != nil {
		tmp = filepath.Join(s.root.Dir, "tmp")
	}
	dir, err := os.MkdirTemp(tmp, "cpython-"+module+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	junit := filepath.Join(dir, "junit.xml")
	// regrtest's --timeout dumps every thread's traceback before it exits: a
	// hang is reported with where it hangs. Go's deadline is the backstop.
	argv := []string{s.python, "-m", "test", module, "-v", "--junit-xml", s.inside(junit),
		"--timeout", fmt.Sprint(int(s.timeout.Seconds()))}
	if s.testdir != "" {
		argv = append(argv, "--testdir", s.testdir)
	}
	for _, p := range matchPatterns(ids) {
		argv = append(argv, "-m", p)
	}
	if rate != "" {
		hl := []string{s.heaplens, "run", "-q", "-o", s.inside(filepath.Join(dir, "capture.hlc"))}
		if rate != "default" {
			hl = append(hl, "--rate", rate)
		}
		argv = append(append(hl, "--"), argv...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout+time.Minute)
	defer cancel()
	cmd := s.command(ctx, dir, argv...)
	cmd.Env = append(append(os.Environ(), s.env...), "TMPDIR="+s.inside(dir))
	// Its own group: a test that signals its process group reaches only its
	// own run, and a hung run is killed whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	r := &run{argv: argv, elapsed: time.Since(start), log: out.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			r.code = 128 + int(ws.Signal())
		}
	case err != nil:
		return nil, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	if ctx.Err() != nil {
		r.log += fmt.Sprintf("\n[killed after %v]\n", s.timeout+time.Minute)
	}
	xmlData, _ := os.ReadFile(junit) // none when the run crashed or hung
	r.cases = parse(xmlData, r.log)
	if r.cases == nil {
		text := tail(r.log, 40)
		if text == "" {
			text = "(no output)"
		}
		r.cases = map[string]*tcase{wholeRunID: {outcome: fmt.Sprintf("no results (exit %d)", r.code), text: text}}
	}
	return r, nil
}

// matchPatterns turns test ids into regrtest -m patterns; a fixture
// ("setUpClass (test.m.C)") selects its class, the module-wide pseudo cases
// select everything.
func matchPatterns(ids []string) []string {
	var pats []string
	for _, id := range ids {
		if id == envCaseID || id == wholeRunID {
			return nil
		}
		if _, scope, fixture := strings.Cut(id, " ("); fixture {
			pats = append(pats, strings.TrimSuffix(scope, ")")+".*")
			continue
		}
		pats = append(pats, id)
	}
	return pats
}

type junitCase struct {
	Name    string    `xml:"name,attr"`
	Failure *struct{} `xml:"failure"`
	Error   *struct{} `xml:"error"`
	Skipped *string   `xml:"skipped"`
	Output  *struct{} `xml:"output"`  // expected failure
	Outcome *string   `xml:"outcome"` // UNEXPECTED_SUCCESS
}

// parse reads regrtest's JUnit file for each case's outcome, then the
// error list unittest prints at the end of the log, which also holds what
// the JUnit file leaves out: failed subtests and failed class or module
// fixtures. Tracebacks come from the log. Without a JUnit file (the run
// crashed or hung) it returns nil.
func parse(junit []byte, log string) map[string]*tcase {
	var doc struct {
		Cases []junitCase `xml:"testsuite>testcase"`
	}
	if len(junit) == 0 || xml.Unmarshal(junit, &doc) != nil {
		return nil
	}
	cases := map[string]*tcase{}
	for _, c := range doc.Cases {
		if c.Name == "" { // a case whose subtests failed: the error list has it
			continue
		}
		tc := &tcase{outcome: ok}
		switch {
		case c.Failure != nil:
			tc.outcome = fail
		case c.Error != nil:
			tc.outcome = errored
		case c.Skipped != nil:
			tc.outcome, tc.text = skipped, *c.Skipped
		case c.Output != nil:
			tc.outcome = xfail
		case c.Outcome != nil:
			tc.outcome = xpass
		}
		cases[c.Name] = tc
	}
	for _, e := range errorList(log) {
		tc := cases[e.id]
		if tc == nil {
			tc = &tcase{}
			cases[e.id] = tc
		}
		if tc.outcome != errored { // FAIL in one subtest and ERROR in another: ERROR
			tc.outcome = e.flavour
		}
		tc.text += e.text
	}
	cases[envCaseID] = &tcase{outcome: unaltered}
	if warnings := envWarning.FindAllString(log, -1); len(warnings) > 0 {
		for i, w := range warnings { // "Before:" and "After:" can print all of os.environ
			if len(w) > 300 {
				warnings[i] = w[:300] + "…"
			}
		}
		cases[envCaseID] = &tcase{outcome: altered, text: strings.Join(warnings, "\n")}
	}
	return cases
}

var (
	envWarning = regexp.MustCompile(`(?m)^Warning -- .*$`)
	// unittest's printErrorList: a line of '=', "FAIL: DESCRIPTION", a line
	// of '-', the traceback.
	errorHeader = regexp.MustCompile(`(?m)^={70}\n(FAIL|ERROR): (.*)\n`)
	errorEnd    = regexp.MustCompile(`(?m)^(={70}|-{70}\nRan \d+ tests?)`)
)

type reported struct{ flavour, id, text string }

func errorList(log string) []reported {
	var out []reported
	for _, m := range errorHeader.FindAllStringSubmatchIndex(log, -1) {
		flavour, desc := log[m[2]:m[3]], log[m[4]:m[5]]
		body := log[m[1]:]
		if end := errorEnd.FindStringIndex(body); end != nil {
			body = body[:end[0]]
		}
		out = append(out, reported{flavour, caseID(desc), fmt.Sprintf("%s: %s\n%s", flavour, desc, body)})
	}
	return out
}

// caseID maps unittest's description of a failure to the JUnit test id.
// 3.11+: "test_x (test.m.C.test_x)"; 3.8–3.10: "test_x (test.m.C)"; a
// subtest appends " (i=1)" or " [msg]"; a fixture is "setUpClass (test.m.C)".
func caseID(desc string) string {
	name, rest, found := strings.Cut(desc, " (")
	scope, _, closed := strings.Cut(rest, ")")
	if !found || !closed {
		return desc
	}
	switch name {
	case "setUpClass", "tearDownClass", "setUpModule", "tearDownModule":
		return name + " (" + scope + ")"
	}
	if strings.HasSuffix(scope, "."+name) {
		return scope
	}
	return scope + "." + name
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
