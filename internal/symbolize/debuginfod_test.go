package symbolize

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// What a server sends is bounded and checked: only hex build IDs are asked
// for, a body over MaxSize is not kept, a miss is not asked again, and a
// file that is not the build ID's debug file is removed by OpenWith's check.
func TestDebuginfodClient(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		switch {
		case strings.Contains(r.URL.Path, "/buildid/aaaa"):
			w.Write([]byte(strings.Repeat("x", 100))) // too large for MaxSize 50
		case strings.Contains(r.URL.Path, "/buildid/bbbb"):
			w.Write([]byte("not an ELF file"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("DEBUGINFOD_URLS", "ftp://ignored "+srv.URL+"/")
	t.Setenv("DEBUGINFOD_MAXSIZE", "50")
	d := NewDebuginfod(t.TempDir())
	if d == nil || len(d.URLs) != 1 || d.MaxSize != 50 {
		t.Fatalf("client %+v", d)
	}
	for _, id := range []string{"../../etc", "AAAA", "ab"} {
		if p := d.fetch(id); p != "" {
			t.Errorf("fetch(%q) = %q", id, p)
		}
	}
	if asked.Load() != 0 {
		t.Errorf("%d requests for build IDs that are not lower-case hex", asked.Load())
	}
	if p := d.fetch("aaaa"); p != "" {
		t.Errorf("a body over MaxSize was kept at %s", p)
	}
	if p := d.fetch("cccc"); p != "" || d.fetch("cccc") != "" || asked.Load() != 2 {
		t.Errorf("a missing build ID: %q, %d requests (want one)", p, asked.Load())
	}
	p := d.fetch("bbbb")
	if p == "" {
		t.Fatal("a body within MaxSize was not kept")
	}
	if df, _ := openDebugFile(p, "/bin/true", "bbbb", nil); df != nil {
		t.Errorf("a non-ELF body was accepted as a debug file")
	}
	t.Setenv("DEBUGINFOD_URLS", "")
	if NewDebuginfod(t.TempDir()) != nil {
		t.Errorf("a client without servers")
	}
	_ = os.Remove(p)
}
