package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/seccomp"
)

// TestAttachSeccomp: a threaded C server under a filter like Docker's
// default profile (an allow-list; EPERM for the rest, ENOSYS for clone3),
// which every container gets: heaplens reads and evaluates it, attaches,
// and each session finds the leak exactly at --rate 1 and within the
// sampling's tolerance at 512 KiB; the server prints and exits as an
// undisturbed twin under the same filter. Filters that block what heaplens
// needs are refused with the call named, one by its arguments (mmap with
// PROT_EXEC), one by its number with death as the default; their servers
// run on untouched. Under the tightest filter that lets heaplens attach
// (the server's own calls and seccomp.Needed, death for any other) the
// sessions find the leak and the server lives: the library makes no call
// outside the list.
func TestAttachSeccomp(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir, "attachserver.c")
	const seconds = "14"
	bare, tg := twins(t, dir, true, bin, seconds, "docker")
	if mode := seccompMode(t, tg.pid()); mode != "2" {
		t.Fatalf("the server runs under seccomp mode %q, want 2 (filters)", mode)
	}
	attachSessions(t, dir, tg, 3, 500*time.Millisecond, "1")
	attachSessions(t, dir, tg, 3, time.Second, "512KiB")
	// Without CAP_SYS_ADMIN (a sidecar's lot) the filter cannot be read.
	res := run(t, time.Minute, "setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", heaplensBin(t), "attach", strconv.Itoa(tg.pid()), "-o", filepath.Join(dir, "nocap.hlc"))
	if want := "which heaplens must read to know what it allows: reading it needs CAP_SYS_ADMIN"; res.code != 1 || !strings.Contains(res.stderr, want) {
		t.Errorf("without CAP_SYS_ADMIN: exit %d, %q; want exit 1 and %q", res.code, res.stderr, want)
	}
	var nrs []string
	for _, c := range seccomp.Needed(0) {
		nrs = append(nrs, strconv.Itoa(int(c.Nr)))
	}
	tightLog := filepath.Join(dir, "tight.log")
	tight := startTarget(t, tightLog, bin, seconds, "tight:"+strings.Join(nrs, ","), tightLog)
	tight.waitLog(t)
	attachSessions(t, dir, tight, 2, time.Second, "1")
	for _, c := range []struct{ filter, want string }{
		{"noexec", "heaplens attach: target's seccomp filter blocks mmap (returns EPERM; "},
		{"strict", "heaplens attach: target's seccomp filter blocks ftruncate (kills the process; "},
	} {
		log := filepath.Join(dir, c.filter+".log")
		refused := startTarget(t, log, bin, seconds, c.filter, log)
		refused.waitLog(t)
		capPath := filepath.Join(dir, c.filter+".hlc")
		res := run(t, time.Minute, heaplensBin(t), "attach", strconv.Itoa(refused.pid()), "--rate", "1", "--duration", "1s", "-o", capPath)
		if res.code != 1 || !strings.HasPrefix(res.stderr, c.want) || !strings.HasSuffix(strings.TrimSpace(res.stderr), "attach would fail") {
			t.Errorf("%s: exit %d, %q; want exit 1 and %q…attach would fail", c.filter, res.code, res.stderr, c.want)
		} else {
			t.Logf("%s: %s", c.filter, strings.TrimSpace(res.stderr))
		}
		if _, err := os.Stat(capPath); err == nil {
			t.Errorf("%s: a refused attach left its capture", c.filter)
		}
		if got, want := refused.wait(t, 2*time.Minute), bare.wait(t, 2*time.Minute); got != want || got.code != 0 {
			t.Errorf("%s: the refused server differs from the bare run:\nbare:    %+v\nrefused: %+v", c.filter, want, got)
		}
	}
	sameAsBare(t, bare, tg)
	sameAsBare(t, bare, tight)
}

// seccompMode is the Seccomp line of /proc/PID/status: 0 none, 1 strict, 2 filters.
func seccompMode(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
