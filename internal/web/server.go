package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/stack"
)

// Server serves the web UI of one capture file: the page at /, and each
// view as the JSON document of docs/json-format.md at
// /api/profile?view=V&pid=P&thread=T&at=D&lifetime=D&min-age=D&focus=RE&hide=RE
// (durations as Go durations, "1.5s").
//
// The file is read again whenever its size or modification time changes,
// so a capture still being written (heaplens run --live) is shown as far
// as it goes; a truncated last chunk is simply not shown yet.
type Server struct {
	Path string // the capture file
	Live bool   // the page polls for updates
	View string // first view shown; "" = peak

	mu    sync.Mutex
	c     *capture.Capture
	size  int64
	mtime time.Time
}

// Capture returns the capture as the file holds it now.
func (s *Server) Capture() (*capture.Capture, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := os.Stat(s.Path)
	if err != nil {
		return nil, err
	}
	if s.c != nil && st.Size() == s.size && st.ModTime().Equal(s.mtime) {
		return s.c, nil
	}
	c, err := capture.Load(s.Path)
	var corrupt *capture.CorruptError
	if err != nil && !(errors.As(err, &corrupt) && c != nil) {
		return nil, err
	}
	stack.Stitch(c)
	s.c, s.size, s.mtime = c, st.Size(), st.ModTime()
	return c, nil
}

// csp lets the page run its own inline script and style and fetch from its
// own origin, and nothing else: a profile holds command lines and paths.
const csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch r.URL.Path {
	case "/", "/index.html":
		view := s.View
		if view == "" {
			view = "peak"
		}
		html, err := page(nil, Mode{Server: true, Live: s.Live, View: view, Interval: 1000})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprint(w, html)
	case "/api/profile":
		s.profile(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) profile(w http.ResponseWriter, r *http.Request) {
	q, err := export.ParseQuery("peak", r.URL.Query().Get)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c, err := s.Capture()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	res, err := q.Compute(c)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(res.Doc())
}

// Listen listens on addr and returns the page's URL and a function that
// serves h until the listener fails. Requests must name the server by a
// loopback name or address, or by the address it listens on: a page of
// another site that rebinds its own name to 127.0.0.1 cannot read it.
func Listen(addr string, h http.Handler) (url string, serve func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	own := ln.Addr().(*net.TCPAddr).IP
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowedHost(r.Host, own) {
			http.Error(w, "heaplens: requests must name a loopback host", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: guard, ReadHeaderTimeout: 10 * time.Second}
	return "http://" + ln.Addr().String() + "/", func() error { return srv.Serve(ln) }, nil
}

// allowedHost reports whether a Host header names this machine's loopback
// (localhost, *.localhost, 127.0.0.0/8, ::1) or own, the address the
// server listens on when that is a specific one.
func allowedHost(host string, own net.IP) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || (!own.IsUnspecified() && ip.Equal(own)))
}
