package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What a newcomer sees when a command is mistyped or help is asked for.
func TestCLIMessages(t *testing.T) {
	dir := t.TempDir()
	capPath := profileBurst(t)
	whole, err := os.ReadFile(capPath)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.hlc")
	if err := os.WriteFile(trunc, whole[:len(whole)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // each must appear
		stderr     []string
		notOut     []string // none may appear
		stderrOnce string   // appears exactly once in stderr
	}{
		{name: "not executable", args: []string{"run", "--", "/etc/passwd"}, code: 126,
			stderr: []string{"cannot execute /etc/passwd: permission denied (not executable)"}},
		{name: "directory", args: []string{"run", "--", dir}, code: 126,
			stderr: []string{"cannot execute " + dir + ": it is a directory"}},
		{name: "missing", args: []string{"run", "--", "no-such-command-heaplens"}, code: 127,
			stderr: []string{"no-such-command-heaplens: command not found"}},
		{name: "run help", args: []string{"run", "--help"}, code: 0,
			stdout: []string{"usage: heaplens run [flags] -- COMMAND", "-ring-size", "(default 16MiB; 128MiB with --rate 1)"}, notOut: []string{"(default 0"}},
		{name: "report help", args: []string{"report", "-h"}, code: 0,
			stdout: []string{"usage: heaplens report CAPTURE", "-view", "-at"}, notOut: []string{"-1ns"}},
		{name: "serve help", args: []string{"serve", "--help"}, code: 0, stdout: []string{"usage: heaplens serve CAPTURE"}},
		{name: "bad flag", args: []string{"run", "--bogus", "--", "true"}, code: 2,
			stderr: []string{"flag provided but not defined: -bogus", "usage: heaplens run"}},
		{name: "push not http", args: []string{"run", "--push", "ftp://x", "--", "true"}, code: 2, stderr: []string{`--push "ftp://x": want the server's http:// or https:// URL`}},
		{name: "app without push", args: []string{"run", "--app", "x", "--", "true"}, code: 2, stderr: []string{"--app, --push-queue and --otlp-command-line go with --push or --otlp"}},
		{name: "push too often", args: []string{"run", "--push", "http://127.0.0.1:1", "--push-every", "100ms", "--", "true"}, code: 2, stderr: []string{"--push-every 100ms: at least 1s"}},
		{name: "bad label", args: []string{"run", "--push", "http://127.0.0.1:1", "--label", "env=a,b", "--", "true"}, code: 2, stderr: []string{`label "env=a,b": the value must`}},
		{name: "pprof bad address", args: []string{"run", "--pprof-addr", "256.0.0.1:1", "--", "true"}, code: 1, stderr: []string{"heaplens run: --pprof-addr: listen tcp"}},
		{name: "window bad mark", args: []string{"window", capPath, "--mark", "x"}, code: 2, stderr: []string{`--mark "x": want PID:VALUE`}},
		{name: "window mark never comes", args: []string{"window", capPath, "--mark", "1:7", "--timeout", "100ms"}, code: 1, stderr: []string{"no mark 7 of pid 1 after 100ms"}},
		{name: "window no capture", args: []string{"window"}, code: 2, stderr: []string{"name one capture file"}},
		{name: "window no windows", args: []string{"window", capPath}, code: 0, stdout: []string{"[]"}},
		{name: "report window backwards", args: []string{"report", capPath, "--window", "2s,1s"}, code: 2, stderr: []string{"UNTIL is before FROM"}},
		{name: "serve bad view", args: []string{"serve", capPath, "--view", "nope"}, code: 2, stderr: []string{`unknown view "nope"`}},
		{name: "truncated capture", args: []string{"report", trunc}, code: 1,
			stdout: []string{"command:   unknown", "rate:      unknown"}, notOut: []string{"rate:      1 B", "command:   ?"},
			stderr: []string{"corrupt chunk", "reporting what is valid"}, stderrOnce: trunc},
		{name: "live defaults to the end", args: []string{"report", capPath, "--view", "live"}, code: 0,
			stdout: []string{"view:      live", "at:        ", "s since the start", "hold (burst.c:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, time.Minute, heaplensBin(t), tt.args...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.code, r.stdout, r.stderr)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tt.notOut {
				if strings.Contains(r.stdout, w) {
					t.Errorf("stdout has %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if tt.stderrOnce != "" && strings.Count(r.stderr, tt.stderrOnce) != 1 {
				t.Errorf("stderr names %s %d times:\n%s", tt.stderrOnce, strings.Count(r.stderr, tt.stderrOnce), r.stderr)
			}
			if tt.code == 0 && strings.Contains(strings.Join(tt.args, " "), "help") && r.stderr != "" {
				t.Errorf("help wrote to stderr: %s", r.stderr)
			}
		})
	}
}

// heaplens window reads its windows from standard input: bad lines are
// refused with their line number.
func TestWindowBadInput(t *testing.T) {
	capPath := profileBurst(t)
	for in, want := range map[string]string{
		"{\"name\":\"a\",\"pid\":1,\"from\":1,\"until\":2}\nnot json\n": "window line 2:",
		"{\"name\":\"a\",\"pid\":0,\"from\":1,\"until\":2}\n":           "window line 1: want a pid",
		"{\"name\":\"a\",\"pid\":5,\"from\":3,\"until\":2}\n":           "from ≤ until",
		"{\"name\":\"a\",\"pid\":5,\"from\":1,\"until\":2,\"x\":1}\n":   "unknown field",
		"{\"name\":\"a\",\"pid\":999999999,\"from\":1,\"until\":2}\n":   "no process with pid 999999999",
	} {
		cmd := exec.Command(heaplensBin(t), "window", capPath)
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("input %q: %v, %s; want an error naming %q", in, err, out, want)
		}
	}
}
