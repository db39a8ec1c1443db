package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"
)

// The fleet tests run test/workloads/leakserver.c, which leaks one block of
// leakBytes per 10 ms tick in leak_slowly and says after each tick how many
// it made, so that what a profile covers is known.
const (
	leakBytes = 64 << 10
	fleetRate = 64 << 10
)

// server is a heaplens run of leakserver in the background.
type server struct {
	cmd    *exec.Cmd
	ticks  atomic.Int64
	url    chan string // the pprof endpoints' URL, when printed
	stderr bytes.Buffer
	mu     sync.Mutex
	done   chan struct{}
	code   int
}

// startServer runs leakserver for seconds, leaking leak bytes a tick.
func startServer(t *testing.T, dir string, seconds, leak int, flags ...string) *server {
	t.Helper()
	bin := build(t, dir, "leakserver.c")
	args := append([]string{"run", "-q", "-o", filepath.Join(dir, "leak.hlc"), "--rate", strconv.Itoa(fleetRate), "--seed", "7"}, flags...)
	return startRun(t, append(args, "--", bin, strconv.Itoa(seconds), strconv.Itoa(leak)), nil, nil)
}

// startRun runs heaplens with args in the background, with env added to
// the environment. The workload prints "tick N ..." after each tick's
// leak: s.ticks follows N, and tick, if not nil, gets each such line's
// fields.
func startRun(t *testing.T, args, env []string, tick func(f []string)) *server {
	t.Helper()
	s := &server{cmd: exec.Command(heaplensBin(t), args...), url: make(chan string, 1), done: make(chan struct{})}
	if env != nil {
		s.cmd.Env = append(os.Environ(), env...)
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "tick" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				if tick != nil {
					tick(f)
				}
				s.ticks.Store(n)
			}
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(errp)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if u, ok := strings.CutPrefix(line, "heaplens: pprof endpoints at "); ok {
				s.url <- u
			}
		}
	}()
	go func() {
		wg.Wait()
		s.cmd.Wait()
		s.code = s.cmd.ProcessState.ExitCode()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

func (s *server) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		t.Fatalf("heaplens run still running after %v\n%s", d, s.errText())
	}
}

func (s *server) errText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

func (s *server) waitTicks(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); s.ticks.Load() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("leakserver made %d ticks in a minute, want %d\n%s", s.ticks.Load(), n, s.errText())
		}
	}
}

// leakTolerance is how far an estimate of n blocks of leakBytes at
// fleetRate may be from n*leakBytes: 4 standard deviations of the
// estimator (docs/sampling.md: each block is drawn with p = 1-exp(-s/r) and
// weighted 1/p, so Var = n·s²·(1/p - 1)), plus slack ticks at each end for
// the agent's polling lag behind the program's output.
func leakTolerance(n, slack int64) float64 {
	p := 1 - math.Exp(-float64(leakBytes)/fleetRate)
	sd := math.Sqrt(float64(n)*(1/p-1)) * leakBytes
	return 4*sd + float64(2*slack*leakBytes)
}

// fnValue sums a sample type's values over samples whose leaf is fn.
func fnValue(p *pprofile.Profile, sampleType, fn string) int64 {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	var v int64
	for _, s := range p.Sample {
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 && s.Location[0].Line[0].Function.Name == fn {
			v += s.Value[idx]
		}
	}
	return v
}

func fetchProfile(t *testing.T, u string) *pprofile.Profile {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", u, resp.Status, b)
	}
	p, err := pprofile.ParseData(b)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return p
}

func TestPProfEndpoints(t *testing.T) {
	dir := t.TempDir()
	gotool := func(args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"tool", "pprof"}, args...)...)
		c.Env = append(os.Environ(), "HOME="+dir, "PPROF_TMPDIR="+dir)
		return c
	}
	gotool("-h").Run() // builds the tool first, which can take longer than the run
	s := startServer(t, dir, 12, leakBytes, "--pprof-addr", "127.0.0.1:0")
	var base string
	select {
	case base = <-s.url:
	case <-time.After(30 * time.Second):
		t.Fatalf("no pprof URL printed\n%s", s.errText())
	}
	s.waitTicks(t, 100)

	// A real pprof client names the leak.
	out, err := gotool("-top", "-sample_index=inuse_space", base+"heap").CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	top := regexp.MustCompile(`(?m)^\s*[0-9.]+[kMG]?B\s+[0-9.]+%\s+[0-9.]+%\s+[0-9.]+[kMG]?B\s+[0-9.]+%\s+(\S+)`).FindStringSubmatch(string(out))
	if top == nil || top[1] != "leak_slowly" {
		t.Errorf("go tool pprof -top: the first row is %v, want leak_slowly\n%s", top, out)
	}

	// A delta over 3 seconds holds what was allocated in them.
	t0 := s.ticks.Load()
	p := fetchProfile(t, base+"allocs?seconds=3")
	t1 := s.ticks.Load()
	if d := time.Duration(p.DurationNanos); d < 3*time.Second || d > 4*time.Second || p.TimeNanos == 0 {
		t.Errorf("delta profile window %v at %d, want 3s", d, p.TimeNanos)
	}
	if p.DefaultSampleType != "alloc_space" {
		t.Errorf("allocs default sample type %q", p.DefaultSampleType)
	}
	got, want := float64(fnValue(p, "alloc_space", "leak_slowly")), float64((t1-t0)*leakBytes)
	if tol := leakTolerance(t1-t0, 5); math.Abs(got-want) > tol {
		t.Errorf("leak_slowly allocated %.0f bytes in the 3 s delta, want %.0f ± %.0f (ticks %d..%d)", got, want, tol, t0, t1)
	}
	if churn := fnValue(p, "alloc_space", "churn"); float64(churn) < 0.5*float64((t1-t0)*16*8192) {
		t.Errorf("churn allocated %d bytes in the delta, want about %d", churn, (t1-t0)*16*8192)
	}

	// The samples say which process; ?pid selects one.
	pid := strconv.Itoa(s.cmd.Process.Pid)
	h := fetchProfile(t, base+"heap")
	var child string
	for _, smp := range h.Sample {
		if len(smp.Label["process"]) != 1 || smp.Label["process"][0] != "leakserver" || len(smp.Label["pid"]) != 1 {
			t.Fatalf("sample labels %v, want process=leakserver and a pid", smp.Label)
		}
		child = smp.Label["pid"][0]
	}
	if child == "" || child == pid {
		t.Fatalf("heap profile: pid label %q (heaplens is %s)", child, pid)
	}
	if n := len(fetchProfile(t, base+"heap?pid="+child).Sample); n == 0 {
		t.Errorf("?pid=%s: no samples", child)
	}
	if n := len(fetchProfile(t, base+"heap?pid=1").Sample); n != 0 {
		t.Errorf("?pid=1: %d samples of another process", n)
	}
	resp, err := http.Get(base + "heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), "leak_slowly") {
		t.Errorf("?debug=1 does not name leak_slowly:\n%s", text)
	}
	s.wait(t, 2*time.Minute)
	if s.code != 0 {
		t.Errorf("exit status %d, want 0\n%s", s.code, s.errText())
	}
}

// ingest is a receiver that takes what Pyroscope's /ingest handler takes:
// POST /ingest?name=APP{k=v,…}&from&until&format=pprof&spyName, with a
// multipart form whose "profile" field is the pprof.
type ingest struct {
	mu     sync.Mutex
	pushes []push
	errs   []string
}

type push struct {
	name        string
	from, until int64
	prof        *pprofile.Profile
}

func (in *ingest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(format string, a ...any) {
		in.mu.Lock()
		in.errs = append(in.errs, fmt.Sprintf(format, a...))
		in.mu.Unlock()
		http.Error(w, fmt.Sprintf(format, a...), http.StatusBadRequest)
	}
	q := r.URL.Query()
	if r.Method != http.MethodPost || r.URL.Path != "/ingest" || q.Get("format") != "pprof" || q.Get("spyName") == "" {
		fail("bad request %s %s", r.Method, r.URL)
		return
	}
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	until, err2 := strconv.ParseInt(q.Get("until"), 10, 64)
	if err1 != nil || err2 != nil || from > until {
		fail("from %q until %q", q.Get("from"), q.Get("until"))
		return
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		fail("content type %q", r.Header.Get("Content-Type"))
		return
	}
	form, err := multipart.NewReader(r.Body, params["boundary"]).ReadForm(32 << 20)
	if err != nil || len(form.File["profile"]) != 1 {
		fail("form: %v", err)
		return
	}
	f, err := form.File["profile"][0].Open()
	if err != nil {
		fail("profile: %v", err)
		return
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	p, err := pprofile.ParseData(b)
	if err != nil {
		fail("profile: %v", err)
		return
	}
	in.mu.Lock()
	in.pushes = append(in.pushes, push{q.Get("name"), from, until, p})
	in.mu.Unlock()
}

func TestPushToIngest(t *testing.T) {
	in := &ingest{}
	srv := httptest.NewServer(in)
	defer srv.Close()
	dir := t.TempDir()
	s := startServer(t, dir, 5, leakBytes, "--push", srv.URL, "--app", "leaky", "--label", "env=test", "--label", "region=eu-1", "--push-every", "1s")
	s.wait(t, 2*time.Minute)
	if s.code != 0 {
		t.Fatalf("exit status %d\n%s", s.code, s.errText())
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.errs) > 0 {
		t.Fatalf("the receiver refused pushes: %v", in.errs)
	}
	if n := len(in.pushes); n < 4 || !strings.Contains(s.errText(), fmt.Sprintf("pushed %d profiles", n)) {
		t.Fatalf("%d pushes received in a 5 s run every 1s; heaplens says:\n%s", n, s.errText())
	}
	var allocated int64
	for i, ps := range in.pushes {
		if ps.name != "leaky{env=test,region=eu-1}" {
			t.Errorf("push %d: name %q", i, ps.name)
		}
		var types []string
		for _, st := range ps.prof.SampleType {
			types = append(types, st.Type+"/"+st.Unit)
		}
		if strings.Join(types, " ") != "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes" {
			t.Errorf("push %d: sample types %v", i, types)
		}
		if i > 0 { // each push's alloc_* covers the time since the previous one
			prev := in.pushes[i-1].prof
			if ps.prof.TimeNanos != prev.TimeNanos+prev.DurationNanos {
				t.Errorf("push %d starts at %d, the previous ended at %d", i, ps.prof.TimeNanos, prev.TimeNanos+prev.DurationNanos)
			}
		}
		allocated += fnValue(ps.prof, "alloc_space", "leak_slowly")
	}
	ticks := s.ticks.Load()
	if ticks != 500 {
		t.Fatalf("leakserver made %d ticks, want 500", ticks)
	}
	want := float64(ticks * leakBytes)
	if tol := leakTolerance(ticks, 0); math.Abs(float64(allocated)-want) > tol {
		t.Errorf("the pushes' alloc_space deltas of leak_slowly sum to %d, want %.0f ± %.0f", allocated, want, tol)
	}
	// While the process lived, inuse_space held the leak so far.
	mid := in.pushes[len(in.pushes)/2].prof
	if inuse := fnValue(mid, "inuse_space", "leak_slowly"); inuse == 0 || inuse > int64(want+leakTolerance(ticks, 0)) {
		t.Errorf("a mid-run push holds %d bytes live in leak_slowly, want between 0 and %.0f", inuse, want)
	}
}

func TestPushServerDown(t *testing.T) {
	ln := httptest.NewServer(http.NotFoundHandler())
	down := ln.URL
	ln.Close() // nothing listens there now
	dir := t.TempDir()
	bin := build(t, dir, "leakserver.c")
	bare := run(t, time.Minute, bin, "2")
	start := time.Now()
	res := run(t, 2*time.Minute, heaplensBin(t), "run", "-q", "-o", filepath.Join(dir, "d.hlc"), "--push", down, "--push-every", "1s", "--", bin, "2")
	if res.code != 0 || res.stdout != bare.stdout {
		t.Fatalf("with the push server down: exit %d, stdout changed: %v\n%s", res.code, res.stdout != bare.stdout, res.stderr)
	}
	m := regexp.MustCompile(`pushed 0 profiles to \S+; 0 refused, (\d+) dropped`).FindStringSubmatch(res.stderr)
	if m == nil || m[1] == "0" {
		t.Errorf("heaplens does not count the profiles it could not push:\n%s", res.stderr)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("a down server held heaplens %v after the command", d)
	}
}

// TestFleetSoak runs leakserver under scrapes and pushes every second and
// checks that heaplens's own memory stays flat and nothing is lost. It
// runs 20 s in the suite; HEAPLENS_SOAK=30m runs the long soak
// (docs/benchmarks.md has its numbers).
func TestFleetSoak(t *testing.T) {
	d := 20 * time.Second
	if v := os.Getenv("HEAPLENS_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("HEAPLENS_SOAK=%q: %v", v, err)
		}
	}
	in := &ingest{}
	recv := httptest.NewServer(in)
	defer recv.Close()
	dir := t.TempDir()
	secs := int(d / time.Second)
	s := startServer(t, dir, secs, 1024, "--pprof-addr", "127.0.0.1:0", "--push", recv.URL, "--push-every", "1s")
	base := <-s.url
	type point struct {
		at  time.Duration
		rss int64
	}
	var rss []point
	start := time.Now()
	scrapes := 0
	for tick := time.NewTicker(time.Second); ; <-tick.C {
		select {
		case <-s.done:
		default:
			if kb := vmRSS(s.cmd.Process.Pid); kb > 0 {
				rss = append(rss, point{time.Since(start), kb})
			}
			for _, ep := range []string{"heap", "allocs"} {
				if resp, err := http.Get(base + ep); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						scrapes++
					}
				}
			}
			continue
		}
		break
	}
	if s.code != 0 {
		t.Fatalf("exit status %d\n%s", s.code, s.errText())
	}
	if len(rss) < 8 || scrapes < 2*(len(rss)-2) {
		t.Fatalf("%d RSS readings, %d scrapes answered in %v", len(rss), scrapes, d)
	}
	// Flat: after the first quarter (start-up, the program's stacks seen),
	// heaplens grows by less than the live blocks it must remember could
	// explain, plus the Go heap's slack.
	q := rss[len(rss)/4]
	last, peak := rss[len(rss)-1], int64(0)
	for _, p := range rss {
		peak = max(peak, p.rss)
	}
	var curve []string
	for i := 0; i < 10; i++ {
		p := rss[i*len(rss)/10]
		curve = append(curve, fmt.Sprintf("%v:%d", p.at.Round(time.Second), p.rss))
	}
	t.Logf("heaplens RSS (KiB) over time: %s", strings.Join(curve, " "))
	t.Logf("heaplens RSS: %d KiB at %v, %d KiB at %v, peak %d KiB; %d scrapes, %d pushes",
		q.rss, q.at.Round(time.Second), last.rss, last.at.Round(time.Second), peak, scrapes, len(in.pushes))
	if grow := last.rss - q.rss; grow > max(8<<10, q.rss/5) {
		t.Errorf("heaplens grew by %d KiB from %v to %v", grow, q.at.Round(time.Second), last.at.Round(time.Second))
	}
	c := load(t, filepath.Join(dir, "leak.hlc"))
	for _, e := range c.Ends {
		if e.DroppedAllocs+e.DroppedFrees > 0 {
			t.Errorf("stream %d dropped %d allocation and %d free records", e.Stream, e.DroppedAllocs, e.DroppedFrees)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !strings.Contains(s.errText(), fmt.Sprintf("pushed %d profiles", len(in.pushes))) || strings.Contains(s.errText(), "dropped") {
		t.Errorf("pushes lost; heaplens says:\n%s", s.errText())
	}
}

// vmRSS returns a process's resident set in KiB, 0 if it cannot be read.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
