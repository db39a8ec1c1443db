package fleet

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/heap"
)

// MaxSeconds bounds ?seconds=N, as a scrape is an HTTP request held open.
const MaxSeconds = 300

// endpoints are the profiles served under /debug/pprof/, as Go names them.
var endpoints = []struct{ name, doc string }{
	{"heap", "live blocks now (inuse_*, the default) and everything allocated since the start (alloc_*)"},
	{"allocs", "the same profile, shown by default as alloc_space"},
}

// Handler serves the profile as Go's net/http/pprof serves a Go program's
// heap: /debug/pprof/heap and /debug/pprof/allocs (pprof protobuf, gzipped;
// ?seconds=N for the change over the next N seconds, ?debug=1 for text,
// ?pid=P for one process) and an index at /debug/pprof/.
func Handler(p *Profile) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><head><title>heaplens /debug/pprof/</title></head><body>\n<p>heaplens profiles of ")
		fmt.Fprint(w, html.EscapeString(commandOf(p)), "</p>\n<ul>\n")
		for _, e := range endpoints {
			fmt.Fprintf(w, "<li><a href=\"%s?debug=1\">%s</a>: %s</li>\n", e.name, e.name, html.EscapeString(e.doc))
		}
		fmt.Fprint(w, "</ul>\n<p>?seconds=N: the change over the next N seconds; ?pid=P: one process; ?debug=1: text.</p></body></html>\n")
	})
	for _, e := range endpoints {
		mux.HandleFunc("/debug/pprof/"+e.name, func(w http.ResponseWriter, r *http.Request) { serveHeap(w, r, p, e.name) })
	}
	return methods(mux)
}

// methods lets only GET and HEAD through, without a body.
func methods(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "heaplens: only GET", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func commandOf(p *Profile) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.c.Meta.Command)
}

func serveHeap(w http.ResponseWriter, r *http.Request, p *Profile, name string) {
	q := r.URL.Query()
	pid, seconds := 0, 0
	var err error
	if v := q.Get("pid"); v != "" {
		if pid, err = strconv.Atoi(v); err != nil || pid <= 0 {
			http.Error(w, "heaplens: pid must be a positive number", http.StatusBadRequest)
			return
		}
	}
	if v := q.Get("seconds"); v != "" {
		if seconds, err = strconv.Atoi(v); err != nil || seconds <= 0 || seconds > MaxSeconds {
			http.Error(w, fmt.Sprintf("heaplens: seconds must be a number from 1 to %d", MaxSeconds), http.StatusBadRequest)
			return
		}
	}
	view := "live" // inuse_space first, as Go's heap profile
	if name == "allocs" {
		view = "allocs"
	}
	snap := p.Snapshot(pid)
	var from time.Time
	if seconds > 0 {
		if !sleep(r.Context(), time.Duration(seconds)*time.Second) {
			return // the client went away
		}
		prev := snap
		snap = p.Snapshot(pid)
		snap.Alloc, snap.Inuse = Delta(prev.Alloc, snap.Alloc), Delta(prev.Inuse, snap.Inuse)
		from = prev.Taken
	}
	if q.Get("debug") != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		shown := snap.Inuse
		if view == "allocs" {
			shown = snap.Alloc
		}
		if err := export.Text(w, snap.Capture, shown, export.TextOptions{Top: 50}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		return
	}
	pb, err := snap.PProf(view, from)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".pb.gz"))
	w.Write(pb)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// PProf writes the snapshot in Go's heap profile shape (export.PProf); view
// "allocs" makes alloc_space the default sample type. A delta (since the
// time from, when not zero) carries its window as TimeNanos and
// DurationNanos, as Go's delta profiles do.
func (s *Snapshot) PProf(view string, from time.Time) ([]byte, error) {
	inuse := *s.Inuse
	inuse.View = view
	var buf bytes.Buffer
	var err error
	if from.IsZero() {
		err = export.PProf(&buf, s.Capture, s.Alloc, &inuse)
	} else {
		err = export.PProfWindow(&buf, s.Capture, s.Alloc, &inuse, from, s.Taken.Sub(from))
	}
	return buf.Bytes(), err
}

// Delta returns cur minus prev, per (process, stack, thread, memory kind): what was allocated
// (or how the live set changed) between two snapshots.
func Delta(prev, cur *heap.Profile) *heap.Profile {
	before := make(map[siteKey]heap.Sample, len(prev.Samples))
	for _, s := range prev.Samples {
		before[siteKey{s.Stream, s.StackID, s.TID, capture.MemKind(s.Func)}] = s
	}
	out := &heap.Profile{View: cur.View, Rate: cur.Rate, Drops: cur.Drops}
	for _, s := range cur.Samples {
		if b, ok := before[siteKey{s.Stream, s.StackID, s.TID, capture.MemKind(s.Func)}]; ok {
			s.Bytes -= b.Bytes
			s.Objects -= b.Objects
			s.Var -= b.Var
			s.Count -= b.Count
		}
		if s.Count != 0 {
			appendSample(out, s)
		}
	}
	return out
}

// Listen serves h on addr ("PORT" alone means 127.0.0.1:PORT) and returns
// the URL of its index and a function that serves until the listener
// fails. On a loopback address, requests must name the server by a
// loopback name, so that a web page whose name rebinds to 127.0.0.1
// cannot read the profiles.
func Listen(addr string, h http.Handler) (url string, serve func() error, err error) {
	if _, err := strconv.Atoi(addr); err == nil {
		addr = "127.0.0.1:" + addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	ip := ln.Addr().(*net.TCPAddr).IP
	if ip.IsLoopback() {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if a := net.ParseIP(host); !(host == "localhost" || a != nil && a.IsLoopback()) {
				http.Error(w, "heaplens: requests must name a loopback host", http.StatusMisdirectedRequest)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		WriteTimeout: (MaxSeconds + 60) * time.Second}
	return "http://" + ln.Addr().String() + "/debug/pprof/", func() error { return srv.Serve(ln) }, nil
}
