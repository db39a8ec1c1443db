package programs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redis-server is Debian's: it allocates with jemalloc (libjemalloc.so.2),
// counts what it holds with malloc_usable_size, and logs to standard output.

// redisLog rewrites what differs in redis-server's log from run to run, and
// only that: the pid and clock time that begin each line
// ("25960:M 26 Nov 2026 18:39:04.041 "), the pid of the version line, and
// the port of the "Running mode" line (a free port, found anew each run).
var (
	redisLinePrefix = regexp.MustCompile(`(?m)^\d+:([CMSX]) \d\d \w{3} \d{4} \d\d:\d\d:\d\d\.\d{3} `)
	redisPid        = regexp.MustCompile(`(?m)(Redis version=.*, pid=)\d+(, just started)$`)
	redisPort       = regexp.MustCompile(`(?m)(Running mode=standalone, port=)\d+\.$`)
)

func redisLog(s string) string {
	s = redisLinePrefix.ReplaceAllString(s, "PID:$1 TIME ")
	s = redisPid.ReplaceAllString(s, "${1}PID$2")
	return redisPort.ReplaceAllString(s, "${1}PORT.")
}

// redisServer is a redis-server started one way, on 127.0.0.1 only.
type redisServer struct {
	way  way
	port int
	done chan outcome
	ctx  context.Context
	stop context.CancelFunc
}

// startRedis starts redis-server the given way on a free port of 127.0.0.1,
// with no persistence, and waits until it answers PING.
func startRedis(t *testing.T, w way, capDir string) *redisServer {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	began := time.Now()
	cmd, stdout, stderr, capture := start(t, ctx, w, dir, capDir, nil, "redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	s := &redisServer{way: w, port: port, done: make(chan outcome, 1), ctx: ctx, stop: cancel}
	go func() { s.done <- waitQuiet(w, cmd, stdout.String, stderr.String, capture, began) }()
	t.Cleanup(func() {
		cancel() // kills the server's group if a failed test left it running
		<-s.done
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case o := <-s.done:
			s.done <- o
			t.Fatalf("%s: redis-server exited %d before it answered\nstdout:\n%s\nstderr:\n%s", w.name, o.code, tail(o.stdout, 40), tail(o.stderr, 20))
		default:
		}
		if c, err := s.dial(); err == nil {
			_, err = c.do("PING")
			c.Close()
			if err == nil {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: redis-server does not answer on port %d after 30 s", w.name, port)
		}
	}
}

// waitQuiet is wait for a goroutine: it reports, it does not fail the test.
// The buffers are read only once the command has ended.
func waitQuiet(w way, cmd *exec.Cmd, stdout, stderr func() string, capture string, began time.Time) outcome {
	code, err := exitStatus(cmd.Wait())
	o := outcome{way: w, code: code, stdout: stdout(), stderr: stderr(), capture: capture, elapsed: time.Since(began)}
	if err != nil {
		o.code = -1
		o.stderr += fmt.Sprintf("\n[wait: %v]", err)
	}
	return o
}

// shutdown stops the server as an operator would and returns its outcome.
// A server that died earlier has its outcome returned as it is.
func (s *redisServer) shutdown(t *testing.T) outcome {
	t.Helper()
	if c, err := s.dial(); err == nil {
		c.do("SHUTDOWN", "NOSAVE") // no reply: the server closes the connection
		c.Close()
	}
	select {
	case o := <-s.done:
		s.done <- o // for the cleanup
		return o
	case <-s.ctx.Done():
		t.Fatalf("%s: redis-server still running after its deadline", s.way.name)
		return outcome{}
	}
}

// freePort is a port of 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// redisConn is a client of the Redis protocol (RESP2), as much as the tests
// use: commands out, one reply each in.
type redisConn struct {
	net.Conn
	r *bufio.Reader
}

func (s *redisServer) dial() (*redisConn, error) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	return &redisConn{c, bufio.NewReaderSize(c, 1<<16)}, nil
}

// resp is a command in the protocol's form.
func resp(args ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

func (c *redisConn) do(args ...string) (string, error) {
	if _, err := c.Write(resp(args...)); err != nil {
		return "", err
	}
	return c.reply()
}

// reply reads one reply: a status, an integer, or a bulk string, as text.
func (c *redisConn) reply() (string, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bulk reply %q", line)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
	return "", fmt.Errorf("reply %q: not one the tests read", line)
}

// info reads one field of INFO's section as a number.
func (c *redisConn) info(section, field string) (int64, error) {
	text, err := c.do("INFO", section)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

// redis-benchmark against the server: SET, GET and LPUSH, pipelined, with
// small and with 20 KB values. Both must succeed every way, and the server
// must log the same and exit 0 after SHUTDOWN.
func TestRedisBenchmark(t *testing.T) {
	if !need(t, "redis-server", "redis-benchmark") {
		return
	}
	capDir := t.TempDir()
	var b outcome
	for _, w := range allWays {
		s := startRedis(t, w, capDir)
		sizes := []string{"3", "20000"}
		ran := 0
		for _, size := range sizes {
			args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-t", "set,get,lpush", "-n", "20000", "-P", "16", "-d", size, "-q"}
			// redis-benchmark waits for ever for a server that died.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := exec.CommandContext(ctx, "redis-benchmark", args...).CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s: redis-benchmark %s: %v\n%s", w.name, strings.Join(args, " "), err, tail(string(out), 20))
				break // the server's log says why
			}
			for _, test := range []string{"SET", "GET", "LPUSH"} {
				// -q ends each test with "SET: N requests per second, …".
				if !regexp.MustCompile(`(?m)(^|\r)` + test + `: [0-9.]+ requests per second`).Match(out) {
					t.Errorf("%s: redis-benchmark -d %s has no result for %s:\n%s", w.name, size, test, tail(string(out), 20))
				}
			}
			ran++
		}
		if ran == len(sizes) {
			s.checkBenchmarked(t, 2*20000, 20000)
		}
		o := s.shutdown(t)
		t.Logf("%s: redis-server exit %d after %v", w.name, o.code, o.elapsed.Round(10*time.Millisecond))
		if w == bare {
			if b = o; o.code != 0 {
				t.Fatalf("bare redis-server exits %d:\n%s", o.code, tail(o.stdout, 30))
			}
			continue
		}
		same(t, b, o, redisLog)
	}
}

// checkBenchmarked checks what redis-benchmark left in the server: its
// LPUSHes all in one list, and its SETs' last value, of the last -d size.
func (s *redisServer) checkBenchmarked(t *testing.T, pushes, lastSize int) {
	t.Helper()
	c, err := s.dial()
	if err != nil {
		t.Errorf("%s: after redis-benchmark: %v", s.way.name, err)
		return
	}
	defer c.Close()
	if n, err := c.do("LLEN", "mylist"); err != nil || n != strconv.Itoa(pushes) {
		t.Errorf("%s: after redis-benchmark, LLEN mylist = %q (%v), want %d", s.way.name, n, err, pushes)
	}
	if v, err := c.do("GET", "key:__rand_int__"); err != nil || len(v) != lastSize {
		t.Errorf("%s: after redis-benchmark, GET key:__rand_int__ has %d bytes (%v), want %d", s.way.name, len(v), err, lastSize)
	}
}

// The keys of TestRedisMemory: redisKeys SETs of a 12-byte key and a value
// of redisValue bytes. Each value is an sds string of 5 bytes of header, the
// value and its terminating 0: 16,384 bytes, one of jemalloc's size classes,
// so that the bytes redis counts (malloc_usable_size) are the bytes asked.
const (
	redisKeys  = 2000
	redisValue = 16384 - 5 - 1
)

// TestRedisMemory SETs known keys into redis-server and compares what redis
// counts for them (INFO memory's used_memory before and after) with the live
// heap heaplens finds at exit at the sites that hold them: where SET's
// arguments are read (processMultibulkBuffer: the value) and where the key is
// stored (setCommand: its copy of the key, the dict's entry and table).
// redis-server ends with SHUTDOWN NOSAVE, which frees nothing: the keys are
// live at exit.
func TestRedisMemory(t *testing.T) {
	if !need(t, "redis-server") {
		return
	}
	capDir := t.TempDir()
	var bareCount int64
	var b outcome
	for _, w := range allWays {
		s := startRedis(t, w, capDir)
		count, err := s.fill()
		o := s.shutdown(t)
		t.Logf("%s: redis-server exit %d after %v", w.name, o.code, o.elapsed.Round(10*time.Millisecond))
		if err != nil {
			t.Errorf("%s: %v\nredis-server exit %d, its log:\n%s", w.name, err, o.code, tail(o.stdout, 60))
			continue
		}
		t.Logf("%s: redis counts %d bytes for %d keys of %d-byte values", w.name, count, redisKeys, redisValue)
		if w == bare {
			if b, bareCount = o, count; o.code != 0 {
				t.Fatalf("bare redis-server exits %d:\n%s", o.code, tail(o.stdout, 30))
			}
			continue
		}
		same(t, b, o, redisLog)
		if o.code != 0 {
			continue
		}
		// Every kind: jemalloc's own mappings must not count a second time.
		d := profile(t, o.capture, "leaks")
		held := siteOf(d, "processMultibulkBuffer", "setCommand")
		// Redis counts each block's size class, heaplens the size asked:
		// they differ for the 12-byte key (14 → 16) and the dict entry
		// (24 → 32), 10 bytes a key; and redis's count also moves with
		// its clients' buffers. 0.5 % of the count bounds both.
		slack := 0.005 * float64(bareCount)
		// heaplens hands redis jemalloc's blocks as they are, so redis
		// counts the same under it as bare (malloc_usable_size unchanged).
		if math.Abs(float64(count-bareCount)) > slack {
			t.Errorf("%s: redis counts %d bytes for the keys under heaplens, %d bare (%+.1f %%): heaplens changed the blocks redis sees",
				w.name, count, bareCount, 100*float64(count-bareCount)/float64(bareCount))
		}
		switch w {
		case exact:
			if diff := float64(bareCount) - held.bytes; diff < 0 || diff > slack {
				t.Errorf("%s: heaplens holds %.0f bytes live at the keys' sites, redis counts %d bare: %.0f apart, want 0 to %.0f", w.name, held.bytes, bareCount, diff, slack)
			}
		default:
			// Four standard deviations: a correct estimate is outside
			// one time in 16,000.
			bound := 4*held.ci95/1.96 + slack
			if diff := math.Abs(held.bytes - float64(count)); diff > bound {
				// Where the values went: read (processMultibulkBuffer) and,
				// when redis finds room to spare in one, trimmed by
				// realloc (sdsResize, under setCommand).
				a := profile(t, o.capture, "allocs")
				t.Errorf("%s: heaplens holds %.0f ± %.0f bytes (95 %%) live at the keys' sites, redis counts %d: %.0f apart, more than %.0f\n"+
					"  allocated (allocs view): %.0f bytes at processMultibulkBuffer, %.0f by sdsResize (redis trimming a value with room to spare)",
					w.name, held.bytes, held.ci95, count, diff, bound, siteOf(a, "processMultibulkBuffer").bytes, siteOf(a, "sdsResize").bytes)
			}
		}
		t.Logf("%s: heaplens holds %.0f ± %.0f bytes (95 %%) in %.0f blocks at the keys' sites", w.name, held.bytes, held.ci95, held.objects)
	}
}

// fill SETs the keys, all at once as `redis-cli --pipe` would, on a
// connection of their own, and returns the growth of used_memory it made.
func (s *redisServer) fill() (int64, error) {
	c, err := s.dial()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	before, err := c.info("memory", "used_memory")
	if err != nil {
		return 0, fmt.Errorf("INFO before the SETs: %w", err)
	}
	p, err := s.dial()
	if err != nil {
		return 0, err
	}
	value := strings.Repeat("v", redisValue)
	sent := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(p, 1<<20)
		for i := 0; i < redisKeys; i++ {
			w.Write(resp("SET", fmt.Sprintf("key:%08d", i), value))
		}
		sent <- w.Flush()
	}()
	for i := 0; i < redisKeys; i++ {
		if r, err := p.reply(); err != nil || r != "OK" {
			p.Close()
			return 0, fmt.Errorf("SET %d of %d: %q, %v", i+1, redisKeys, r, err)
		}
	}
	if err := <-sent; err != nil {
		return 0, fmt.Errorf("sending the SETs: %w", err)
	}
	p.Close()
	// Its connection's buffers count until the server has freed it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := c.info("clients", "connected_clients")
		if err != nil {
			return 0, fmt.Errorf("INFO clients: %w", err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d clients connected 10 s after the SETs' connection closed", n)
		}
	}
	after, err := c.info("memory", "used_memory")
	if err != nil {
		return 0, fmt.Errorf("INFO after the SETs: %w", err)
	}
	return after - before, nil
}
