package e2e

import (
	"fmt"
	"github.com/heaplens/heaplens/test/testenv"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A stripped library's debug file is fetched from a debuginfod server
// (Debian's, serving a directory this test fills) named by DEBUGINFOD_URLS,
// as gdb and perf do: the static function the library allocates in gets its
// name and line. Without the server the same frame is an address.
func TestDebuginfod(t *testing.T) {
	server, err := exec.LookPath("debuginfod")
	if err != nil {
		testenv.Missing(t, "debuginfod (Debian package debuginfod; scripts/deps.sh installs it): the debuginfod test does NOT run: %v", err)
		return
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libdbglib.so")
	served := filepath.Join(dir, "served")
	sh := func(cmd string) {
		t.Helper()
		if b, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, b)
		}
	}
	sh(fmt.Sprintf("gcc -O2 -g -fPIC -shared -Wl,--build-id -o %s %s", lib, filepath.Join(root, "test", "workloads", "dbglib.c")))
	sh(fmt.Sprintf("mkdir -p %s && objcopy --only-keep-debug %s %s/libdbglib.debug && strip --strip-all %s", served, lib, served, lib))
	main := filepath.Join(dir, "dbgmain")
	sh(fmt.Sprintf("gcc -O2 -g -o %s %s -L%s -ldbglib -Wl,-rpath,%s", main, filepath.Join(root, "test", "workloads", "dbgmain.c"), dir, dir))
	line := siteLines(t, filepath.Join(root, "test", "workloads", "dbglib.c"))["hidden_alloc"]

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command(server, "-F", served, "-p", fmt.Sprint(port), "-d", filepath.Join(dir, "db.sqlite"), "-t", "1")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	buildID := strings.TrimSpace(func() string {
		b, _ := exec.Command("sh", "-c", "readelf -n "+lib+" | sed -n 's/.*Build ID: //p'").Output()
		return string(b)
	}())
	if buildID == "" {
		t.Fatal("the library has no build ID")
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // the server scans its directory in the background
		resp, err := http.Get(url + "/buildid/" + buildID + "/debuginfo")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("debuginfod never served build ID %s: %v", buildID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	site := fmt.Sprintf("hidden_alloc (dbglib.c:%d)", line)
	for _, tt := range []struct {
		name string
		env  []string
		want bool
	}{
		{"without a server", []string{"DEBUGINFOD_URLS="}, false},
		{"with the server", []string{"DEBUGINFOD_URLS=" + url}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			capPath := filepath.Join(t.TempDir(), "dbg.hlc")
			env := append(os.Environ(), "HEAPLENS_SYMBOL_CACHE="+t.TempDir())
			env = append(env, tt.env...)
			res := runEnv(t, 2*time.Minute, env, heaplensBin(t), "run", "-q", "--rate", "1", "-o", capPath, "--", main)
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			leaks := report(t, capPath, "leaks")
			got := false
			for stack, bytes := range leaks {
				got = got || (strings.HasSuffix(stack, ";"+site) && bytes >= 16<<20)
			}
			if got != tt.want {
				t.Errorf("%s named: %v, want %v; leaks:\n%v", site, got, tt.want, leaks)
			}
		})
	}
}

// A stripped library that keeps its local functions' symbols as
// MiniDebugInfo (.gnu_debugdata, an xz-compressed symbol table, as Fedora
// ships them) names the static function it allocates in; the same library
// without it shows an address.
func TestMiniDebugInfo(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(root, "test", "workloads", "dbglib.c")
	main := filepath.Join(root, "test", "workloads", "dbgmain.c")
	script := `set -e
gcc -O2 -g -fPIC -shared -o libdbglib.so ` + src + `
nm -D libdbglib.so --format=posix --defined-only | awk '{print $1}' | sort > dynsyms
nm libdbglib.so --format=posix --defined-only | awk '$2 == "T" || $2 == "t" {print $1}' | sort > funcsyms
comm -13 dynsyms funcsyms > keep
objcopy --only-keep-debug libdbglib.so full.debug
objcopy -S --remove-section .comment --keep-symbols=keep full.debug mini
xz -f mini
strip --strip-all libdbglib.so
mkdir -p plain && cp libdbglib.so plain/
objcopy --add-section .gnu_debugdata=mini.xz libdbglib.so
gcc -O2 -o main-mini ` + main + ` -L. -ldbglib -Wl,-rpath,` + dir + `
gcc -O2 -o main-plain ` + main + ` -L. -ldbglib -Wl,-rpath,` + dir + `/plain
`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the MiniDebugInfo library: %v\n%s", err, b)
	}
	for _, tt := range []struct {
		bin  string
		want bool
	}{{"main-mini", true}, {"main-plain", false}} {
		t.Run(tt.bin, func(t *testing.T) {
			capPath := filepath.Join(t.TempDir(), "mini.hlc")
			env := append(os.Environ(), "HEAPLENS_SYMBOL_CACHE=off", "DEBUGINFOD_URLS=")
			res := runEnv(t, 2*time.Minute, env, heaplensBin(t), "run", "-q", "--rate", "1", "-o", capPath, "--", filepath.Join(dir, tt.bin))
			if res.code != 0 {
				t.Fatalf("exit %d: %s", res.code, res.stderr)
			}
			leaks := report(t, capPath, "leaks")
			got := false
			for stack, bytes := range leaks {
				leaf := stack[strings.LastIndexByte(stack, ';')+1:] // GCC may name a clone hidden_alloc.constprop.0
				got = got || (strings.HasPrefix(leaf, "hidden_alloc") && strings.HasSuffix(leaf, " (libdbglib.so)") && bytes >= 16<<20)
			}
			if got != tt.want {
				t.Errorf("hidden_alloc named: %v, want %v; leaks:\n%v", got, tt.want, leaks)
			}
		})
	}
}
