package web

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/heaplens/heaplens/internal/export"
)

// A frame name cannot close the data's <script> element.
func TestWriteHTMLEscapes(t *testing.T) {
	d := &export.Doc{Schema: export.Schema, View: "peak", Frames: []export.DocFrame{{Label: "</script><b>x", Kind: "native"}}}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, d); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	if strings.Contains(s, "</script><b>x") || !strings.Contains(s, `\u003c/script\u003e`) {
		t.Errorf("unescaped frame label in the page")
	}
	if strings.Contains(s, "/*HEAPLENS_") || strings.Contains(s, "http://") || strings.Contains(s, "https://") {
		t.Errorf("placeholder left or network reference in the page")
	}
}

func TestServerErrors(t *testing.T) {
	s := &Server{Path: "/nonexistent.hlc"}
	for _, u := range []string{"/api/profile?view=peak", "/api/profile?at=x", "/nope"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
		if rec.Code < 400 {
			t.Errorf("%s: %d", u, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"server":true`) {
		t.Errorf("/: %d", rec.Code)
	}
}

func TestAllowedHost(t *testing.T) {
	own := net.ParseIP("192.0.2.7")
	tests := []struct {
		host string
		own  net.IP
		want bool
	}{
		{"127.0.0.1:8080", net.IPv4zero, true},
		{"127.1.2.3", net.IPv4zero, true},
		{"localhost:1234", net.IPv4zero, true},
		{"LOCALHOST.", net.IPv4zero, true},
		{"app.localhost:80", net.IPv4zero, true},
		{"[::1]:9000", net.IPv4zero, true},
		{"evil.example:8080", net.IPv4zero, false},
		{"localhost.evil.example", net.IPv4zero, false},
		{"192.0.2.7:8080", net.IPv4zero, false}, // listening on every address: only loopback names
		{"192.0.2.7:8080", own, true},
		{"192.0.2.8:8080", own, false},
		{"", net.IPv4zero, false},
	}
	for _, tt := range tests {
		if got := allowedHost(tt.host, tt.own); got != tt.want {
			t.Errorf("allowedHost(%q, %v) = %v, want %v", tt.host, tt.own, got, tt.want)
		}
	}
}

// A page whose name was rebound to 127.0.0.1 sends its own name as Host:
// refused. The page itself carries a policy that allows nothing external.
func TestServeRefusesForeignHost(t *testing.T) {
	url, serve, err := Listen("127.0.0.1:0", &Server{Path: "/nonexistent.hlc"})
	if err != nil {
		t.Fatal(err)
	}
	go serve()
	get := func(host string) *http.Response {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get("rebound.evil.example"); r.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: status %d, want 421", r.StatusCode)
	}
	r := get(strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	if r.StatusCode != http.StatusOK {
		t.Errorf("own Host: status %d", r.StatusCode)
	}
	if p := r.Header.Get("Content-Security-Policy"); !strings.Contains(p, "default-src 'none'") || strings.Contains(p, "http") {
		t.Errorf("Content-Security-Policy %q", p)
	}
}
