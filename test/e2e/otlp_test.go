package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collpb "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	commonpb "go.opentelemetry.io/proto/slim/otlp/common/v1"
	profpb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	"google.golang.org/protobuf/proto"
)

// The OTLP tests export to a real OpenTelemetry Collector (test/otelcol:
// the collector's otlp receiver and the contrib file exporter, built by
// scripts/otelcol.sh as bin/otelcol) the profile of
// test/workloads/pyleakserver.py, which leaks leakBytes in leak_slowly
// every 10 ms tick and prints when, at fleetRate.

// otelcolBin returns bin/otelcol, failing loudly when it was not built.
func otelcolBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(root, "bin", "otelcol")
	if _, err := os.Stat(bin); err != nil {
		t.Log("!!! bin/otelcol, the OpenTelemetry Collector of test/otelcol, is missing: run `make otelcol` (make test does)")
		t.Fatalf("!!! MISSING bin/otelcol: %v", err)
	}
	return bin
}

// collector is a running OpenTelemetry Collector whose file exporter
// writes what it received to out.
type collector struct {
	cmd    *exec.Cmd
	out    string
	logs   bytes.Buffer
	exited chan struct{} // closed when it has exited
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCollector runs the collector with the profiles feature gate on, its
// OTLP/HTTP receiver on 127.0.0.1:port, until it listens.
func startCollector(t *testing.T, dir string, port int, out string) *collector {
	t.Helper()
	return startCollectorConfig(t, dir, port, out, fileConfig("http", port, out))
}

// fileConfig is a collector configuration that receives OTLP profiles over
// protocol (http or grpc) on a loopback port and writes them to out.
func fileConfig(protocol string, port int, out string) string {
	return collectorConfig(protocol, port, "profiles", "file", fmt.Sprintf(`
    path: %s
    format: proto
    flush_interval: 100ms`, out))
}

// collectorConfig is a collector configuration whose one pipeline (of
// signal) receives OTLP over protocol on a loopback port and hands it to
// the exporter with settings (YAML indented under it).
func collectorConfig(protocol string, port int, signal, exporter, settings string) string {
	return fmt.Sprintf(`receivers:
  otlp:
    protocols:
      %s:
        endpoint: 127.0.0.1:%d
exporters:
  %s:%s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    %s:
      receivers: [otlp]
      exporters: [%s]
`, protocol, port, exporter, settings, signal, exporter)
}

// startCollectorConfig runs the collector with a configuration, until it
// listens on 127.0.0.1:port.
func startCollectorConfig(t *testing.T, dir string, port int, out, yaml string) *collector {
	t.Helper()
	cfg := filepath.Join(dir, fmt.Sprintf("otelcol-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &collector{out: out, exited: make(chan struct{}), cmd: exec.Command(otelcolBin(t), "--config", cfg, "--feature-gates=+service.profilesSupport")}
	c.cmd.Stdout, c.cmd.Stderr = &c.logs, &c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() { c.cmd.Process.Kill(); <-c.exited })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			conn.Close()
			return c
		}
		select {
		case <-c.exited:
			t.Fatalf("the collector exited:\n%s", c.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector does not listen on 127.0.0.1:%d after a minute:\n%s", port, c.logs.String())
		}
	}
}

// stop shuts the collector down as an operator would (SIGTERM: the file
// exporter flushes) and returns the requests it wrote.
func (c *collector) stop(t *testing.T) []*collpb.ExportProfilesServiceRequest {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the collector did not stop in 30 s:\n%s", c.logs.String())
	}
	if strings.Contains(c.logs.String(), "\"error\"") || strings.Contains(c.logs.String(), "\terror\t") {
		t.Errorf("the collector logged errors:\n%s", c.logs.String())
	}
	if c.out == "" {
		return nil
	}
	return readExports(t, c.out)
}

// waitExports waits, up to timeout, for the file exporter's file to hold n
// complete requests (readExports' format).
func waitExports(path string, n int, timeout time.Duration) {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		k := 0
		for len(b) >= 4 && int(binary.BigEndian.Uint32(b)) <= len(b)-4 {
			b = b[4+binary.BigEndian.Uint32(b):]
			k++
		}
		if k >= n {
			return
		}
	}
}

// readExports parses the file exporter's proto format: each request a
// 4-byte big-endian length, then the OTLP profiles message.
func readExports(t *testing.T, path string) []*collpb.ExportProfilesServiceRequest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the collector wrote nothing: %v", err)
	}
	var out []*collpb.ExportProfilesServiceRequest
	for len(b) > 0 {
		if len(b) < 4 || int(binary.BigEndian.Uint32(b)) > len(b)-4 {
			t.Fatalf("%s: truncated record", path)
		}
		n := binary.BigEndian.Uint32(b)
		r := &collpb.ExportProfilesServiceRequest{}
		if err := proto.Unmarshal(b[4:4+n], r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
		b = b[4+n:]
	}
	return out
}

// otlpExport is one request as the collector wrote it, resolved.
type otlpExport struct {
	resource map[string]any
	types    []string // sample type/unit of each profile
	period   string   // period type/unit and period of the first
	from     int64    // time_unix_nano, the same in every profile
	until    int64
	samples  [][]otlpSample // by profile
	dict     *profpb.ProfilesDictionary
}

type otlpSample struct {
	value  int64
	attrs  map[string]any
	frames []otlpFrame // leaf first
}

type otlpFrame struct {
	fn, file, typ string
	line          int64
	mapped        bool
}

// anyOf is an attribute's value; the collector may write strings as
// indices into the dictionary's string table (OTLP 1.10).
func anyOf(v *commonpb.AnyValue, strs []string) any {
	switch v := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return v.StringValue
	case *commonpb.AnyValue_StringValueStrindex:
		return strs[v.StringValueStrindex]
	case *commonpb.AnyValue_IntValue:
		return v.IntValue
	}
	return nil
}

// resolve checks that a request is what one heaplens export is (one
// resource, one scope, four profiles over the same window) and reads it
// through its dictionary.
func resolve(t *testing.T, r *collpb.ExportProfilesServiceRequest) otlpExport {
	t.Helper()
	d := r.Dictionary
	if d == nil || len(r.ResourceProfiles) != 1 || len(r.ResourceProfiles[0].ScopeProfiles) != 1 {
		t.Fatalf("want one resource, one scope and a dictionary, got %d resources", len(r.ResourceProfiles))
	}
	str := func(i int32) string { return d.StringTable[i] }
	attrs := func(idx []int32) map[string]any {
		m := map[string]any{}
		for _, i := range idx {
			a := d.AttributeTable[i]
			m[str(a.KeyStrindex)] = anyOf(a.Value, d.StringTable)
		}
		return m
	}
	e := otlpExport{resource: map[string]any{}, dict: d}
	for _, kv := range r.ResourceProfiles[0].Resource.GetAttributes() {
		k := kv.Key
		if k == "" {
			k = str(kv.KeyStrindex)
		}
		e.resource[k] = anyOf(kv.Value, d.StringTable)
	}
	for i, p := range r.ResourceProfiles[0].ScopeProfiles[0].Profiles {
		e.types = append(e.types, str(p.SampleType.TypeStrindex)+"/"+str(p.SampleType.UnitStrindex))
		if i == 0 {
			e.period = fmt.Sprintf("%s/%s %d", str(p.PeriodType.TypeStrindex), str(p.PeriodType.UnitStrindex), p.Period)
			e.from, e.until = int64(p.TimeUnixNano), int64(p.TimeUnixNano+p.DurationNano)
		} else if int64(p.TimeUnixNano) != e.from || int64(p.TimeUnixNano+p.DurationNano) != e.until {
			t.Errorf("profile %d covers another window than the first", i)
		}
		var ss []otlpSample
		for _, s := range p.Samples {
			smp := otlpSample{value: s.Values[0], attrs: attrs(s.AttributeIndices)}
			for _, li := range d.StackTable[s.StackIndex].LocationIndices {
				loc := d.LocationTable[li]
				typ, _ := attrs(loc.AttributeIndices)["profile.frame.type"].(string)
				for _, ln := range loc.Lines {
					f := d.FunctionTable[ln.FunctionIndex]
					smp.frames = append(smp.frames, otlpFrame{str(f.NameStrindex), str(f.FilenameStrindex), typ, ln.Line, loc.MappingIndex != 0})
				}
			}
			ss = append(ss, smp)
		}
		e.samples = append(e.samples, ss)
	}
	return e
}

// leakIn sums a profile's values over samples whose stack holds fn.
func (e otlpExport) leakIn(profile int, fn string) int64 {
	var v int64
	for _, s := range e.samples[profile] {
		if slices.ContainsFunc(s.frames, func(f otlpFrame) bool { return f.fn == fn }) {
			v += s.value
		}
	}
	return v
}

// pyLeak is a heaplens run of pyleakserver.py with its tick log.
type pyLeak struct {
	*server
	mu    sync.Mutex
	times []int64 // wall clock after each tick's leak
}

// before counts the ticks whose leak happened before t (unix ns).
func (p *pyLeak) before(t int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearch(p.times, t)
	return int64(i)
}

// startPyLeak runs pyleakserver.py for seconds under heaplens run with
// flags, and env added to the environment.
func startPyLeak(t *testing.T, dir string, seconds int, env []string, flags ...string) *pyLeak {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Log("!!! Debian's /usr/bin/python3 is missing (scripts/deps.sh installs it)")
		t.Fatalf("!!! MISSING %s: %v", py, err)
	}
	args := append([]string{"run", "-q", "-o", filepath.Join(dir, "pyleak.hlc"), "--rate", strconv.Itoa(fleetRate), "--seed", "7"}, flags...)
	args = append(args, "--", py, filepath.Join(root, "test", "workloads", "pyleakserver.py"), strconv.Itoa(seconds))
	p := &pyLeak{}
	p.server = startRun(t, args, env, func(f []string) {
		at, _ := strconv.ParseInt(f[2], 10, 64)
		p.mu.Lock()
		p.times = append(p.times, at)
		p.mu.Unlock()
	})
	return p
}

// leakLine is the line of test/workloads/pyleakserver.py that leaks.
func leakLine(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "test", "workloads", "pyleakserver.py"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "kept.append(bytes(LEAK))") {
			return int64(i + 1)
		}
	}
	t.Fatal("pyleakserver.py: no leak line")
	return 0
}

var exportedRE = regexp.MustCompile(`heaplens: exported (\d+) OTLP profile requests \([^)]*\) to (\S+?)(?:; (\d+) refused, (\d+) dropped \(last error: .*\))?\n`)

const (
	allocObjects = iota
	allocSpace
	inuseObjects
	inuseSpace
)

func TestOTLPExportToCollector(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	col := startCollector(t, dir, port, filepath.Join(dir, "profiles.otlp"))
	p := startPyLeak(t, dir, 6, nil, "--otlp", fmt.Sprintf("http://127.0.0.1:%d", port), "--app", "pyleak", "--push-every", "1s")
	p.wait(t, 2*time.Minute)
	reqs := col.stop(t)
	if p.code != 0 {
		t.Fatalf("exit status %d\n%s", p.code, p.errText())
	}
	m := exportedRE.FindStringSubmatch(p.errText())
	if m == nil || m[3] != "" || m[2] != fmt.Sprintf("http://127.0.0.1:%d/v1development/profiles", port) {
		t.Fatalf("the summary does not say all went to the collector:\n%s", p.errText())
	}
	if n, _ := strconv.Atoi(m[1]); n != len(reqs) || n < 6 {
		t.Fatalf("heaplens exported %s requests in a 6 s run every 1 s; the collector wrote %d", m[1], len(reqs))
	}
	ticks := p.ticks.Load()
	if ticks != 600 {
		t.Fatalf("pyleakserver made %d ticks, want 600", ticks)
	}
	host, _ := os.Hostname()
	version, err := exec.Command("/usr/bin/python3", "-c", "import platform; print(platform.python_version())").Output()
	if err != nil {
		t.Fatal(err)
	}
	line := leakLine(t)
	lastTick := p.times[len(p.times)-1]
	var allocated int64
	var exports []otlpExport
	for i, r := range reqs {
		e := resolve(t, r)
		exports = append(exports, e)
		if want := "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes"; strings.Join(e.types, " ") != want {
			t.Fatalf("export %d: sample types %v, want %s", i, e.types, want)
		}
		if e.period != fmt.Sprintf("space/bytes %d", fleetRate) {
			t.Errorf("export %d: period %s", i, e.period)
		}
		res := e.resource
		pid, _ := res["process.pid"].(int64)
		if res["service.name"] != "pyleak" || res["host.name"] != host || pid <= 0 || pid == int64(p.cmd.Process.Pid) ||
			!strings.HasPrefix(fmt.Sprint(res["process.executable.name"]), "python3") ||
			res["process.runtime.name"] != "cpython" || res["process.runtime.version"] != strings.TrimSpace(string(version)) {
			t.Errorf("export %d: resource %v", i, res)
		}
		if _, ok := res["process.command_line"]; ok {
			t.Errorf("export %d: process.command_line without --otlp-command-line", i)
		}
		if i > 0 && e.from != exports[i-1].until {
			t.Errorf("export %d starts at %d, the previous ended at %d", i, e.from, exports[i-1].until)
		}
		// The leak is named by function, file and line, as a Python frame,
		// made on the main thread (thread.id = process.pid) of the process.
		for _, s := range e.samples[allocSpace] {
			j := slices.IndexFunc(s.frames, func(f otlpFrame) bool { return f.fn == "leak_slowly" })
			if j < 0 {
				continue
			}
			f := s.frames[j]
			if f.line != line || filepath.Base(f.file) != "pyleakserver.py" || f.typ != "cpython" || f.mapped {
				t.Errorf("export %d: leak_slowly frame %+v, want pyleakserver.py:%d, cpython", i, f, line)
			}
			if s.attrs["process.pid"] != pid || s.attrs["thread.id"] != pid || s.attrs["heaplens.memory.kind"] == nil ||
				!strings.HasPrefix(fmt.Sprint(s.attrs["process.executable.name"]), "python3") {
				t.Errorf("export %d: leak sample attributes %v (process %d)", i, s.attrs, pid)
			}
			if !slices.ContainsFunc(s.frames, func(f otlpFrame) bool { return f.typ == "native" && f.mapped }) {
				t.Errorf("export %d: the leak's stack has no native frame with its mapping: %+v", i, s.frames)
			}
		}
		// alloc_* are this window's: what leaked in it, by the workload's
		// clock (10 ticks of slack at each end for the agent's lag behind it).
		got := e.leakIn(allocSpace, "leak_slowly")
		n := p.before(e.until) - p.before(e.from)
		if tol := leakTolerance(n, 10); math.Abs(float64(got-n*leakBytes)) > tol {
			t.Errorf("export %d: leak_slowly allocated %d bytes in [%d, %d), the workload leaked %d blocks then: want %d ± %.0f",
				i, got, e.from, e.until, n, n*leakBytes, tol)
		}
		allocated += got
		// inuse_* are a snapshot at the window's end while the process lives.
		if e.until < lastTick {
			live := p.before(e.until)
			got := e.leakIn(inuseSpace, "leak_slowly")
			if tol := leakTolerance(live, 10); math.Abs(float64(got-live*leakBytes)) > tol {
				t.Errorf("export %d: %d bytes live in leak_slowly at %d, the workload had leaked %d blocks: want %d ± %.0f",
					i, got, e.until, live, live*leakBytes, tol)
			}
			if objs := e.leakIn(inuseObjects, "leak_slowly"); math.Abs(float64(objs-live)) > leakTolerance(live, 10)/leakBytes {
				t.Errorf("export %d: %d objects live in leak_slowly, want %d", i, objs, live)
			}
		}
	}
	t.Logf("%d exports; leak_slowly allocated %d bytes over them, the workload %d", len(exports), allocated, ticks*leakBytes)
	if tol := leakTolerance(ticks, 0); math.Abs(float64(allocated-ticks*leakBytes)) > tol {
		t.Errorf("the exports' alloc_space of leak_slowly adds up to %d, want %d ± %.0f", allocated, ticks*leakBytes, tol)
	}
}

func TestOTLPCollectorRestart(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	first := startCollector(t, dir, port, filepath.Join(dir, "first.otlp"))
	started := time.Now()
	// The collector is named the standard way here, and the resource too.
	env := []string{fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", port), "OTEL_SERVICE_NAME=restarts",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test,service.name=ignored,team=a%2Cb"}
	p := startPyLeak(t, dir, 14, env, "--push-every", "1s", "--push-queue", "12KiB", "--otlp-command-line")
	p.waitTicks(t, 300)
	got := first.stop(t)
	down := time.Now()
	p.waitTicks(t, 900) // six seconds without a collector
	second := startCollector(t, dir, port, filepath.Join(dir, "second.otlp"))
	up := time.Now()
	p.wait(t, 2*time.Minute)
	after := second.stop(t)
	if p.code != 0 {
		t.Fatalf("exit status %d\n%s", p.code, p.errText())
	}
	m := exportedRE.FindStringSubmatch(p.errText())
	if m == nil || m[4] == "" {
		t.Fatalf("the summary does not count what was dropped:\n%s", p.errText())
	}
	sent, _ := strconv.Atoi(m[1])
	refused, _ := strconv.Atoi(m[3])
	dropped, _ := strconv.Atoi(m[4])
	t.Logf("collector down %v; %d exports before, %d after; heaplens: %s", up.Sub(down).Round(time.Millisecond), len(got), len(after), strings.TrimSpace(m[0]))
	if sent != len(got)+len(after) || refused != 0 {
		t.Errorf("heaplens says %d exported, %d refused; the collectors wrote %d and %d", sent, refused, len(got), len(after))
	}
	if dropped == 0 {
		t.Fatalf("a 12 KiB queue kept six seconds of exports: this test does not see an overflow")
	}
	if !strings.Contains(p.errText(), fmt.Sprintf("exporting OTLP profiles to http://127.0.0.1:%d/v1development/profiles (from $OTEL_EXPORTER_OTLP_ENDPOINT)", port)) {
		t.Errorf("heaplens does not say where $OTEL_EXPORTER_OTLP_ENDPOINT sends the profiles:\n%s", p.errText())
	}
	var exports []otlpExport
	script := filepath.Join(root, "test", "workloads", "pyleakserver.py")
	for i, r := range append(got, after...) {
		e := resolve(t, r)
		exports = append(exports, e)
		res := e.resource
		if res["service.name"] != "restarts" || res["deployment.environment.name"] != "test" || res["team"] != "a,b" ||
			res["process.command_line"] != "/usr/bin/python3 "+script+" 14" {
			t.Errorf("export %d: resource %v", i, res)
		}
	}
	// Exports resume: the second collector gets queued windows from while
	// it was down and windows after.
	var queued, later int
	for _, e := range exports[len(got):] {
		if e.until < up.UnixNano() {
			queued++
		} else {
			later++
		}
	}
	if later < 3 || queued == 0 {
		t.Errorf("after the restart the collector got %d exports queued while it was down and %d of later windows", queued, later)
	}
	// Only the overflow is lost: the gaps between windows are the dropped
	// exports' periods (each about --push-every), and what leaked in the
	// windows that arrived is all there. The first export, from the start
	// (all the interpreter's start-up stacks), may not fit the 12 KiB queue
	// either (it holds about four others): when the first window that arrived starts a period after
	// heaplens did, it was lost too.
	lead := 0
	if time.Duration(exports[0].from-started.UnixNano()) > 500*time.Millisecond {
		lead = 1
	}
	var gap time.Duration
	var allocated, want int64
	var blocks int64
	for i, e := range exports {
		if i > 0 && e.from < exports[i-1].until {
			t.Fatalf("export %d starts at %d, before the previous ended at %d", i, e.from, exports[i-1].until)
		}
		if i > 0 {
			gap += time.Duration(e.from - exports[i-1].until)
		}
		n := p.before(e.until) - p.before(e.from)
		blocks += n
		want += n * leakBytes
		allocated += e.leakIn(allocSpace, "leak_slowly")
	}
	var windows []string
	for _, e := range exports {
		windows = append(windows, fmt.Sprintf("[%.2f,%.2f)", float64(e.from-exports[0].from)/1e9, float64(e.until-exports[0].from)/1e9))
	}
	t.Logf("windows (s from the first): %s; down at %.2f, up at %.2f", strings.Join(windows, " "),
		float64(down.UnixNano()-exports[0].from)/1e9, float64(up.UnixNano()-exports[0].from)/1e9)
	t.Logf("%d dropped (%d the first), %v of windows missing between; %d queued exports delivered after the restart", dropped, lead, gap.Round(time.Millisecond), queued)
	if mid := time.Duration(dropped-lead) * time.Second; gap < mid-500*time.Millisecond || gap > mid+500*time.Millisecond {
		t.Errorf("the windows that did not arrive last %v; %d dropped exports every 1 s would last %v", gap, dropped-lead, mid)
	}
	if tol := leakTolerance(blocks, 10); math.Abs(float64(allocated-want)) > tol {
		t.Errorf("the exports that arrived hold %d bytes allocated by leak_slowly; in their windows the workload leaked %d ± %.0f", allocated, want, tol)
	}
}

// TestOTLPAttach exports from heaplens attach: a Python server running
// without heaplens, attached to for four seconds. The profiles go through
// a first collector that forwards them over gRPC with the otlp_grpc
// exporter, as docs/fleet.md forwards them to Pyroscope, to the collector
// that writes them.
func TestOTLPAttach(t *testing.T) {
	dir := t.TempDir()
	port, grpcPort := freePort(t), freePort(t)
	col := startCollectorConfig(t, dir, grpcPort, filepath.Join(dir, "attach.otlp"), fileConfig("grpc", grpcPort, filepath.Join(dir, "attach.otlp")))
	gateway := startCollectorConfig(t, dir, port, "", collectorConfig("http", port, "profiles", "otlp_grpc/next", fmt.Sprintf(`
    endpoint: 127.0.0.1:%d
    tls:
      insecure: true`, grpcPort)))
	py := exec.Command("/usr/bin/python3", filepath.Join(root, "test", "workloads", "pyleakserver.py"), "10")
	out, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := py.Start(); err != nil {
		t.Fatalf("!!! Debian's /usr/bin/python3 does not start (scripts/deps.sh installs it): %v", err)
	}
	t.Cleanup(func() { py.Process.Kill(); py.Wait() })
	var mu sync.Mutex
	var times []int64
	ticked := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "tick" {
				at, _ := strconv.ParseInt(f[2], 10, 64)
				mu.Lock()
				times = append(times, at)
				mu.Unlock()
				select {
				case ticked <- struct{}{}:
				default:
				}
			}
		}
	}()
	<-ticked // the interpreter is up and leaking
	res := run(t, 2*time.Minute, heaplensBin(t), "attach", strconv.Itoa(py.Process.Pid), "-q", "-o", filepath.Join(dir, "attach.hlc"),
		"--rate", strconv.Itoa(fleetRate), "--duration", "4s", "--otlp", fmt.Sprintf("http://127.0.0.1:%d", port), "--push-every", "1s")
	if res.code != 0 {
		t.Fatalf("heaplens attach: exit %d\n%s", res.code, res.stderr)
	}
	m := exportedRE.FindStringSubmatch(res.stderr)
	if m == nil || m[3] != "" {
		t.Fatalf("the summary does not say all went to the collector:\n%s", res.stderr)
	}
	// The gateway forwards what it took a little later: the last export
	// reaches the file once both collectors have passed it on.
	exported, _ := strconv.Atoi(m[1])
	waitExports(filepath.Join(dir, "attach.otlp"), exported, 10*time.Second)
	gateway.stop(t) // it has sent on what it took
	reqs := col.stop(t)
	if n, _ := strconv.Atoi(m[1]); n != len(reqs) || n < 4 {
		t.Fatalf("heaplens exported %s requests in a 4 s attach every 1 s; the collector wrote %d", m[1], len(reqs))
	}
	mu.Lock()
	defer mu.Unlock()
	before := func(at int64) int64 {
		i, _ := slices.BinarySearch(times, at)
		return int64(i)
	}
	var exports []otlpExport
	var allocated int64
	line := leakLine(t)
	named := false
	for i, r := range reqs {
		e := resolve(t, r)
		exports = append(exports, e)
		if e.resource["service.name"] != "python3" || e.resource["process.pid"] != int64(py.Process.Pid) || e.resource["process.runtime.name"] != "cpython" {
			t.Errorf("export %d: resource %v, want service.name python3 (the process's name), process.pid %d", i, e.resource, py.Process.Pid)
		}
		if i > 0 && e.from != exports[i-1].until {
			t.Errorf("export %d starts at %d, the previous ended at %d", i, e.from, exports[i-1].until)
		}
		for _, s := range e.samples[allocSpace] {
			named = named || slices.ContainsFunc(s.frames, func(f otlpFrame) bool {
				return f.fn == "leak_slowly" && f.line == line && f.typ == "cpython"
			})
		}
		allocated += e.leakIn(allocSpace, "leak_slowly")
	}
	if !named {
		t.Errorf("no export names leak_slowly at pyleakserver.py:%d", line)
	}
	// What leaked while attached: heaplens sees allocations from the
	// attach on, within the windows it exported.
	n := before(exports[len(exports)-1].until) - before(exports[0].from)
	if tol := leakTolerance(n, 10); math.Abs(float64(allocated-n*leakBytes)) > tol {
		t.Errorf("the attach's exports hold %d bytes allocated by leak_slowly; while attached it leaked %d blocks: want %d ± %.0f",
			allocated, n, n*leakBytes, tol)
	}
	t.Logf("%d exports over %.1f s; leak_slowly allocated %d bytes, the workload %d", len(exports),
		float64(exports[len(exports)-1].until-exports[0].from)/1e9, allocated, n*leakBytes)
}

// TestOTLPRefusedByCollector exports to a collector that takes no profiles
// (a traces pipeline only: a common mistake). It answers 404: heaplens
// names the refusal once, does not retry, counts every refused request, and
// the command runs as it would without heaplens.
func TestOTLPRefusedByCollector(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	col := startCollectorConfig(t, dir, port, "", collectorConfig("http", port, "traces", "debug", " {}"))
	p := startPyLeak(t, dir, 3, nil, "--otlp", fmt.Sprintf("http://127.0.0.1:%d", port), "--push-every", "1s")
	p.wait(t, 2*time.Minute)
	col.cmd.Process.Signal(syscall.SIGTERM)
	<-col.exited
	if p.code != 0 || p.ticks.Load() != 300 {
		t.Fatalf("exit status %d after %d ticks, want 0 after 300\n%s", p.code, p.ticks.Load(), p.errText())
	}
	m := exportedRE.FindStringSubmatch(p.errText())
	if m == nil || m[1] != "0" || m[4] != "0" {
		t.Fatalf("the summary does not say every request was refused:\n%s", p.errText())
	}
	if refused, _ := strconv.Atoi(m[3]); refused < 3 {
		t.Errorf("%d requests refused in a 3 s run every 1 s", refused)
	}
	if n := strings.Count(p.errText(), "refused the profiles: 404 Not Found"); n != 2 || !strings.Contains(p.errText(), "not retried") ||
		!strings.Contains(p.errText(), "service.profilesSupport") {
		t.Errorf("the refusal is named %d times on its own (want once, and once in the summary):\n%s", n-1, p.errText())
	}
}
