package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// TimeBin is GNU time (Debian's package time). It measures the peak RSS of
// the command it starts: GNU time forks, so the command does not inherit
// the harness's own peak, as a child started by Go (vfork semantics: the
// shared mm's peak is kept across exec) would.
const TimeBin = "/usr/bin/time"

// Exec is one run of a command.
type Exec struct {
	WallS float64 // the harness clock, start to reaped
	// CPUS is user+sys of the whole process tree (wait4's rusage of GNU
	// time, which includes every descendant it and they reaped: a
	// profiler's agent, helper processes and the target all count).
	CPUS float64
	// TreeRSSKB is GNU time's %M: the largest peak RSS of any one process
	// of the tree (not their sum).
	TreeRSSKB int64
	Stdout    string
	Stderr    string
}

// Command says how to run one command.
type Command struct {
	Argv    []string
	Env     []string      // the whole environment (see CleanEnv)
	Stdin   string        // file to read standard input from, "" for none
	Dir     string        // working directory, "" for the harness's
	Timeout time.Duration // 0: no limit
	Scratch string        // directory for GNU time's output file
}

// Run runs c under GNU time and measures it. A non-zero exit is an error
// that carries the last lines of standard error.
func Run(c Command) (Exec, error) {
	var r Exec
	if len(c.Argv) == 0 {
		return r, errors.New("harness: empty command")
	}
	ctx := context.Background()
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	tf, err := os.CreateTemp(c.Scratch, "time-*.out")
	if err != nil {
		return r, fmt.Errorf("harness: %w", err)
	}
	tf.Close()
	defer os.Remove(tf.Name())
	argv := append([]string{TimeBin, "-f", "%M", "-o", tf.Name()}, c.Argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	if c.Stdin != "" {
		in, err := os.Open(c.Stdin)
		if err != nil {
			return r, fmt.Errorf("harness: stdin: %w", err)
		}
		defer in.Close()
		cmd.Stdin = in
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	r.WallS = time.Since(start).Seconds()
	r.Stdout, r.Stderr = stdout.String(), stderr.String()
	if ps := cmd.ProcessState; ps != nil {
		r.CPUS = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if b, rerr := os.ReadFile(tf.Name()); rerr == nil {
		// GNU time prints "Command exited with non-zero status N" before
		// the number when the command fails: the number is the last line.
		r.TreeRSSKB, _ = strconv.ParseInt(LastLines(string(b), 1), 10, 64)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %v", c.Timeout)
		}
		return r, fmt.Errorf("%s: %v\n%s", strings.Join(shortArgv(c.Argv), " "), err, LastLines(r.Stderr, 12))
	}
	return r, nil
}

// shortArgv shows file arguments by base name, for error messages.
func shortArgv(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if strings.HasPrefix(a, "/") {
			a = filepath.Base(a)
		}
		out[i] = a
	}
	return out
}

// CleanEnv is the environment without anything that would change what is
// measured: an inherited LD_PRELOAD, HEAPLENS_*, GLIBC_TUNABLES, MEMRAY_*
// or PYTHON* variable (PYTHONMALLOC above all) would turn "bare" into
// something else. PYTHONHASHSEED is fixed so every run hashes alike; extra
// is appended.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "HEAPLENS_") ||
			strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, "PYTHON") ||
			strings.HasPrefix(kv, "MEMRAY_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1")
	return append(env, extra...)
}

// SetEnv returns env with key set to value (replacing an earlier value).
func SetEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// ResultLine is the last line of out that holds key= (a workload's result
// line; a profiler may print after it).
func ResultLine(out, key string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, f := range strings.Fields(lines[i]) {
			if strings.HasPrefix(f, key+"=") {
				return lines[i]
			}
		}
	}
	return ""
}

// RawValue is the text after key= in line, "" when absent: checksums are
// compared as printed, not as parsed floats.
func RawValue(line, key string) string {
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// VmHWM returns the number of the last "VmHWM: N kB" line of out (a copy of
// /proc/PID/status's), 0 when there is none.
func VmHWM(out string) int64 {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Debian ships.
const clockTicks = 100

// ProcStatCPU finds a copy of a /proc/PID/stat line in out and returns its
// user+system time in seconds.
func ProcStatCPU(out string) (float64, bool) {
	for _, l := range strings.Split(out, "\n") {
		i := strings.LastIndexByte(l, ')')
		if i < 0 || !strings.Contains(l[:i], " (") {
			continue
		}
		f := strings.Fields(l[i+1:]) // f[0] is field 3 (state); utime and stime are fields 14 and 15
		if len(f) < 13 || len(f[0]) != 1 {
			continue
		}
		u, err1 := strconv.ParseFloat(f[11], 64)
		s, err2 := strconv.ParseFloat(f[12], 64)
		if err1 == nil && err2 == nil {
			return (u + s) / clockTicks, true
		}
	}
	return 0, false
}

// LastLines returns the last n non-empty lines of s, joined by " / ".
func LastLines(s string, n int) string {
	var ls []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " / ")
}

// ByteLabel prints n bytes in the largest binary unit that keeps it ≥ 1.
func ByteLabel(n float64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(n/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(n/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(n/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatFloat(n, 'f', 0, 64) + " B"
}

// FileSize is the size of the file at path, 0 when it does not exist.
func FileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
