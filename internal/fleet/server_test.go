package fleet

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/heaplens/heaplens/internal/heap"
)

func TestHandler(t *testing.T) {
	p := New()
	writeCapture(t, 1, p)
	srv := httptest.NewServer(Handler(p))
	defer srv.Close()
	tests := []struct {
		method, path string
		status       int
		body         string // in the response; for pprof, a function name
	}{
		{"GET", "/debug/pprof/", 200, `href="heap?debug=1"`},
		{"GET", "/debug/pprof/heap", 200, "submit"},
		{"GET", "/debug/pprof/allocs", 200, "worker_main"},
		{"HEAD", "/debug/pprof/heap", 200, ""},
		{"GET", "/debug/pprof/heap?debug=1", 200, "submit"},
		{"GET", "/debug/pprof/heap?pid=100", 200, "submit"},
		{"GET", "/debug/pprof/profile", 404, ""},
		{"GET", "/debug/pprof/heap?seconds=0", 400, "seconds must be"},
		{"GET", "/debug/pprof/heap?seconds=301", 400, "seconds must be"},
		{"GET", "/debug/pprof/heap?seconds=x", 400, "seconds must be"},
		{"GET", "/debug/pprof/heap?pid=-1", 400, "pid must be"},
		{"POST", "/debug/pprof/heap", 405, "only GET"},
		{"DELETE", "/debug/pprof/", 405, "only GET"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: %d, want %d: %s", tt.method, tt.path, resp.StatusCode, tt.status, b)
			continue
		}
		body := string(b)
		if resp.Header.Get("Content-Type") == "application/octet-stream" && tt.method == "GET" {
			prof, err := profile.ParseData(b)
			if err != nil {
				t.Errorf("%s: %v", tt.path, err)
				continue
			}
			body = prof.String()
		}
		if !strings.Contains(body, tt.body) {
			t.Errorf("%s %s: no %q in\n%s", tt.method, tt.path, tt.body, body)
		}
	}
}

func TestDefaultSampleType(t *testing.T) {
	p := New()
	writeCapture(t, 1, p)
	snap := p.Snapshot(0)
	for view, want := range map[string]string{"live": "inuse_space", "allocs": "alloc_space"} {
		b, err := snap.PProf(view, snap.Taken.Add(-1))
		if err != nil {
			t.Fatal(err)
		}
		prof, err := profile.ParseData(b)
		if err != nil {
			t.Fatal(err)
		}
		if prof.DefaultSampleType != want || prof.DurationNanos != 1 {
			t.Errorf("%s: default %q, duration %d; want %q, 1", view, prof.DefaultSampleType, prof.DurationNanos, want)
		}
	}
}

// On a loopback address, a request must name a loopback host: a web page
// on evil.example that rebinds its name to 127.0.0.1 gets nothing.
func TestListenLoopbackHost(t *testing.T) {
	url, serve, err := Listen("127.0.0.1:0", Handler(New()))
	if err != nil {
		t.Fatal(err)
	}
	go serve()
	for host, want := range map[string]int{"": 200, "localhost": 200, "evil.example": http.StatusMisdirectedRequest} {
		req, _ := http.NewRequest("GET", url, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

func TestDelta(t *testing.T) {
	p := New()
	writeCapture(t, 4096, p)
	a := p.Snapshot(0)
	d := Delta(a.Alloc, a.Alloc)
	if len(d.Samples) != 0 || d.TotalBytes != 0 {
		t.Errorf("a profile minus itself: %+v", d)
	}
	all := Delta(&heap.Profile{}, a.Alloc)
	if len(all.Samples) != len(a.Alloc.Samples) || !near(all.TotalBytes, a.Alloc.TotalBytes) || !near(all.TotalVar, a.Alloc.TotalVar) {
		t.Errorf("a profile minus nothing: %v bytes in %d samples, want %v in %d", all.TotalBytes, len(all.Samples), a.Alloc.TotalBytes, len(a.Alloc.Samples))
	}
}
