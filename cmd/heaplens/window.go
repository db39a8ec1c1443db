package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
	"github.com/heaplens/heaplens/internal/stack"
)

// windowSpec is one line of heaplens window's input.
type windowSpec struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	From  int64  `json:"from"`  // CLOCK_MONOTONIC ns
	Until int64  `json:"until"` // CLOCK_MONOTONIC ns
}

// maxWindows bounds the input: one line per test of a session.
const maxWindows = 1 << 20

func windowCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("heaplens window", "heaplens window CAPTURE [--mark PID:VALUE] [--timeout D] [--top N] < WINDOWS.jsonl", args, stdout, stderr)
	mark := fs.String("mark", "", "first wait until the capture holds the mark VALUE that process PID made with heaplens_mark")
	timeout := fs.Duration("timeout", 30*time.Second, "with --mark, how long to wait for it")
	top := fs.Int("top", 3, "stacks per figure")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitCode(err)
	}
	if len(pos) != 1 || *top < 0 {
		fmt.Fprintln(stderr, "heaplens window: name one capture file")
		fs.Usage()
		return 2
	}
	specs, err := readWindows(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens window: %v\n", err)
		return 2
	}
	var c *capture.Capture
	if *mark != "" {
		pid, value, err := parseMark(*mark)
		if err != nil {
			fmt.Fprintf(stderr, "heaplens window: --mark %q: %v\n", *mark, err)
			return 2
		}
		if c, err = waitMark(pos[0], pid, value, *timeout); err != nil {
			fmt.Fprintf(stderr, "heaplens window: %v\n", err)
			return 1
		}
		stack.Stitch(c)
	} else {
		var ok bool
		if c, _, ok = loadCapture(pos[0], "window", stderr); !ok {
			return 1
		}
	}
	docs := make([]export.WindowDoc, 0, len(specs))
	for _, s := range specs {
		streams := c.StreamsOf(s.PID)
		if streams == nil {
			fmt.Fprintf(stderr, "heaplens window: %s: no process with pid %d in the capture\n", s.Name, s.PID)
			return 1
		}
		v := heap.Window(c, heap.Options{Streams: streams}, s.From, s.Until)
		docs = append(docs, export.NewWindowDoc(c, s.Name, s.From, s.Until, v, *top))
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false) // frames such as <module> stay readable
	if err := enc.Encode(docs); err != nil {
		fmt.Fprintf(stderr, "heaplens window: %v\n", err)
		return 1
	}
	return 0
}

// readWindows reads one JSON window per line.
func readWindows(r io.Reader) ([]windowSpec, error) {
	var specs []windowSpec
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if len(specs) == maxWindows {
			return nil, fmt.Errorf("more than %d windows", maxWindows)
		}
		var s windowSpec
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("window line %d: %v", n, err)
		}
		if s.PID <= 0 || s.Until < s.From {
			return nil, fmt.Errorf("window line %d: want a pid and from ≤ until", n)
		}
		specs = append(specs, s)
	}
	return specs, sc.Err()
}

func parseMark(s string) (pid int, value uint64, err error) {
	p, v, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, errors.New("want PID:VALUE")
	}
	if pid, err = strconv.Atoi(p); err != nil || pid <= 0 {
		return 0, 0, errors.New("the pid must be a positive number")
	}
	if value, err = strconv.ParseUint(v, 10, 64); err != nil {
		return 0, 0, errors.New("the value must be a number")
	}
	return pid, value, nil
}

// waitMark loads the capture until it holds process pid's mark value: the
// agent flushes the file when it writes a mark, so everything the process
// recorded before it is then in the file. A capture still being written
// ends in a partial chunk, which is not an error here.
func waitMark(path string, pid int, value uint64, timeout time.Duration) (*capture.Capture, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := capture.Load(path)
		var ce *capture.CorruptError
		if err != nil && !errors.As(err, &ce) && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if c != nil && hasMark(c, pid, value) {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no mark %d of pid %d after %v (is the process profiled by heaplens run?)", path, value, pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasMark(c *capture.Capture, pid int, value uint64) bool {
	for _, m := range c.Marks {
		if m.Value == value {
			if p := c.Process(m.Stream); p != nil && p.PID == pid {
				return true
			}
		}
	}
	return false
}
