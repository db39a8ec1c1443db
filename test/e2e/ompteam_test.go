package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/test/testenv"
)

// ompVariants are the region kinds of ompteam.c; each has a _tail and a _call variant.
var ompVariants = []string{"parallel", "dynamic", "guided", "runtime", "mono_dynamic", "mono_guided", "mono_runtime", "static", "sections", "reductions", "teams", "legacy"}

// ompShapes checks that the gcc build of ompteam.c has the shapes the team
// test is about: NAME_tail jumps to its GOMP entry point (a tail call: the
// runtime sees the caller's return address), NAME_call calls it. Without
// that, a passing test would prove nothing about tail calls.
func ompShapes(t *testing.T, lib string) {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", lib).Output()
	if err != nil {
		t.Fatalf("objdump -d %s (Debian package binutils): %v", lib, err)
	}
	insn := map[string]string{} // function -> how it first enters GOMP_parallel* or GOMP_teams_reg: "jmp" or "call"
	fn := ""
	head := regexp.MustCompile(`^[0-9a-f]+ <(\w+)>:$`)
	to := regexp.MustCompile(`\s(jmp|call)\s+[0-9a-f]+ <GOMP_(?:parallel|teams_reg)\w*@plt>`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			fn = m[1]
		} else if m := to.FindStringSubmatch(line); m != nil && insn[fn] == "" {
			insn[fn] = m[1]
		}
	}
	want := map[string]string{}
	for _, v := range ompVariants {
		want[v+"_tail"], want[v+"_call"] = "jmp", "call"
	}
	want["legacy_tail"] = "call"     // GOMP_parallel_start; its GOMP_parallel_end is the jump, checked below
	want["reductions_tail"] = "call" // a cleanup call follows GOMP_parallel_reductions
	for f, w := range want {
		if insn[f] != w {
			t.Errorf("%s: %s's first transfer to GOMP is %q, want %q: the workload lost its shape", lib, f, insn[f], w)
		}
	}
	if !regexp.MustCompile(`(?s)<legacy_tail>:.*?jmp\s+[0-9a-f]+ <GOMP_parallel_end@plt>.*?\n\n`).MatchString(string(out)) {
		t.Errorf("%s: legacy_tail does not tail-call GOMP_parallel_end", lib)
	}
}

// teamLine is a line of ompteam's output.
var teamLine = regexp.MustCompile(`(?m)^\w+ team=(\d+) result=\d+$`)

// allTeams says whether every region had more than one thread (or team:
// libomp gives host teams no more than one per CPU, and this machine may have 2).
func allTeams(lines [][]string) bool {
	for _, m := range lines {
		if m[1] == "0" || m[1] == "1" {
			return false
		}
	}
	return true
}

// OpenMP regions run with the same team, and compute the same, under
// heaplens as without it, whatever the region's shape and however its
// library was loaded: GOMP_parallel, the GOMP_parallel_loop_* schedules,
// GOMP_parallel_sections, GOMP_parallel_reductions, GOMP_teams_reg and the legacy
// start/end pair, each as a tail call and as a plain call; from a C program
// that dlopens the library RTLD_LOCAL and has no OpenMP runtime of its own,
// from one linked against it, from Python's ctypes on every interpreter,
// and from an underlinked library (its references bind in its dlopen root's
// scope: heaplens must find the runtime elsewhere, and says so). The known
// answer is the bare run of the same command.
func TestOpenMPTeamSizes(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(root, "test", "workloads", "ompteam.c")
	lib := buildShared(t, dir, "gcc", "ompteam.c", "libompteam.so", "-fopenmp")
	ompShapes(t, lib)
	mainDL := build(t, dir, "ompteam_main.c", "-ldl")
	linkedDir := t.TempDir()
	mainLinked := build(t, linkedDir, "ompteam_main.c", "-DLINKED", "-L"+dir, "-Wl,--no-as-needed", "-l:libompteam.so", "-Wl,-rpath,"+dir, "-ldl")
	under, underRoot := filepath.Join(dir, "libompteam_under.so"), filepath.Join(dir, "libompteam_root.so")
	for _, cmd := range [][]string{
		{"gcc", "-O2", "-g", "-fPIC", "-fopenmp", "-c", "-o", filepath.Join(dir, "under.o"), src},
		{"gcc", "-shared", "-o", under, filepath.Join(dir, "under.o")}, // no -fopenmp: libgomp is not among its dependencies
		{"gcc", "-shared", "-fPIC", "-o", underRoot, "-x", "c", "/dev/null", "-Wl,--no-as-needed", "-L" + dir, "-l:libompteam_under.so", "-lgomp", "-Wl,-rpath," + dir},
	} {
		if b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, b)
		}
	}
	if b, _ := exec.Command("readelf", "-d", under).Output(); strings.Contains(string(b), "libgomp") {
		t.Fatalf("%s links libgomp: it is not underlinked\n%s", under, b)
	}
	type job struct {
		what    string
		command []string
		guessed bool            // heaplens must report that it had to look outside the caller's scope
		root    *testenv.Chroot // run inside it (the library and script copied there); nil: the host
	}
	jobs := []job{
		{"C dlopen RTLD_LOCAL", []string{mainDL, lib}, false, nil},
		{"C linked", []string{mainLinked}, false, nil},
		{"C dlopen, underlinked", []string{mainDL, underRoot}, true, nil},
		{"python3 ctypes, underlinked", []string{"/usr/bin/python3", filepath.Join(root, "test", "workloads", "ompteam.py"), underRoot}, true, nil},
	}
	for _, py := range everyPython(t) {
		jobs = append(jobs, job{py.name + " ctypes", []string{py.path, filepath.Join(root, "test", "workloads", "ompteam.py"), lib}, false, py.root})
	}
	if _, err := exec.LookPath("clang"); err != nil {
		testenv.Missing(t, "clang (Debian packages clang and libomp-dev; scripts/deps.sh installs them): the libomp case does NOT run")
	} else {
		clangLib := buildShared(t, dir, "clang", "ompteam.c", "libompteam_clang.so", "-fopenmp=libomp")
		jobs = append(jobs, job{"clang/libomp, C dlopen RTLD_LOCAL", []string{mainDL, clangLib}, false, nil})
	}
	env := []string{"OMP_NUM_THREADS=4"} // not this machine's CPU count: the team is the program's choice
	regions := 2 * 2 * len(ompVariants)  // each variant twice
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := onHost(t)
			if j.root != nil {
				w = inRoot(t, *j.root)
				j.command = []string{j.command[0], w.workload(t, "ompteam.py"), w.copy(t, j.command[2])}
			}
			bare := w.run(t, 2*time.Minute, env, j.command...)
			if m := teamLine.FindAllStringSubmatch(bare.stdout, -1); bare.code != 0 || len(m) != regions || !allTeams(m) {
				t.Errorf("%s: the bare run does not give %d regions several threads each (exit %d): the test would prove nothing\n%s%s",
					j.what, regions, bare.code, bare.stdout, bare.stderr)
				return
			}
			capPath, capArg := w.file("team.hlc")
			res := w.heaplens(t, 2*time.Minute, env, append([]string{"run", "-q", "-o", capArg, "--"}, j.command...)...)
			if res.code != 0 || res.stdout != bare.stdout {
				t.Errorf("%s: under heaplens (exit %d), teams and results differ from the bare run:\n%s\nbare:\n%s\nstderr:\n%s",
					j.what, res.code, res.stdout, bare.stdout, res.stderr)
			}
			c, err := capture.Load(capPath) // -q: the warnings are in the capture only
			if err != nil {
				t.Errorf("%s: %v", j.what, err)
				return
			}
			var notes []string
			for _, n := range c.Notes {
				notes = append(notes, n.Text)
			}
			all := strings.Join(notes, "\n")
			note := fmt.Sprintf("%d OpenMP regions of pid", regions)
			if j.guessed != strings.Contains(all, note) || !j.guessed && strings.Contains(all, "OpenMP regions") {
				t.Errorf("%s: want the note %q in the capture: %v; got:\n%s", j.what, note, j.guessed, all)
			}
		}()
	}
	wg.Wait()
}
