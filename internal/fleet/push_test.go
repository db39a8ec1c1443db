package fleet

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// receiver answers each push with the next status of a script (the last
// one repeats) and keeps the profiles it accepted.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	calls    int
	got      []*profile.Profile
	names    []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.statuses[min(r.calls, len(r.statuses)-1)]
	r.calls++
	if st != 200 {
		http.Error(w, "no", st)
		return
	}
	f, _, err := req.FormFile("profile")
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	b, _ := io.ReadAll(f)
	p, err := profile.ParseData(b)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	r.got = append(r.got, p)
	r.names = append(r.names, req.URL.Query().Get("name"))
}

func startPusher(t *testing.T, r *receiver, every time.Duration, maxQueue int) *Pusher {
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	p := New()
	writeCapture(t, 1, p)
	ps := &Pusher{URL: srv.URL, App: "app", Labels: map[string]string{"env": "test", "az": "b"}, Every: every, MaxQueue: maxQueue, backoff: 20 * time.Millisecond}
	ps.Start(p)
	return ps
}

func TestPushRetriesThenDelivers(t *testing.T) {
	r := &receiver{statuses: []int{503, 502, 200}}
	ps := startPusher(t, r, 50*time.Millisecond, 0)
	time.Sleep(400 * time.Millisecond)
	st := ps.Stop(time.Now().Add(5 * time.Second))
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.Retries != 2 || st.Pushed < 3 || st.Pushed != len(r.got) || st.Dropped != 0 || st.Rejected != 0 {
		t.Fatalf("stats %+v, receiver got %d", st, len(r.got))
	}
	if r.names[0] != "app{az=b,env=test}" {
		t.Errorf("name %q", r.names[0])
	}
	// Retried profiles arrive in order and their windows follow each other;
	// the first covers the run from its start, alloc_* holding everything.
	var allocated int64
	for i, p := range r.got {
		if i > 0 && p.TimeNanos != r.got[i-1].TimeNanos+r.got[i-1].DurationNanos {
			t.Errorf("push %d starts at %d, not where push %d ended", i, p.TimeNanos, i-1)
		}
		for _, s := range p.Sample {
			allocated += s.Value[1]
		}
	}
	if r.got[0].TimeNanos != 1 {
		t.Errorf("the first push starts at %d, want the run's start (1)", r.got[0].TimeNanos)
	}
	want := New()
	writeCapture(t, 1, want)
	if total := int64(want.Snapshot(0).Alloc.TotalBytes); allocated != total {
		t.Errorf("the pushes' alloc_space adds up to %d, want the %d allocated", allocated, total)
	}
}

func TestPushQueueBounded(t *testing.T) {
	r := &receiver{statuses: []int{503}}
	p := New()
	writeCapture(t, 1, p)
	size, _ := p.Snapshot(0).PProf("live", time.Now()) // about what each push weighs
	ps := startPusher(t, r, 5*time.Millisecond, 3*len(size)+len(size)/2)
	deadline := time.Now().Add(10 * time.Second)
	for ps.Stats().Dropped < 10 && time.Now().Before(deadline) {
		ps.mu.Lock()
		if ps.bytes > ps.MaxQueue || len(ps.queue) > 3 {
			t.Errorf("queue holds %d profiles, %d bytes, over its %d", len(ps.queue), ps.bytes, ps.MaxQueue)
		}
		ps.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	st := ps.Stop(time.Now().Add(5 * time.Second))
	if st.Dropped < 10 || st.Pushed != 0 || st.LastErr == "" {
		t.Errorf("with the server failing: %+v", st)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Stop waited %v for a failing server", d)
	}
}

func TestPushRejected(t *testing.T) {
	r := &receiver{statuses: []int{400, 200}}
	ps := startPusher(t, r, 20*time.Millisecond, 0)
	time.Sleep(100 * time.Millisecond)
	st := ps.Stop(time.Now().Add(5 * time.Second))
	if st.Rejected != 1 || st.Retries != 0 || st.Pushed < 2 || st.Dropped != 0 {
		t.Errorf("a 400 then 200s: %+v", st)
	}
}

func TestIngestURL(t *testing.T) {
	ps := &Pusher{URL: "https://pyro.example/base/", App: "svc", Labels: map[string]string{"region": "eu-1", "env": "prod"}}
	u, err := url.Parse(ps.ingestURL(&payload{from: time.Unix(100, 5), until: time.Unix(115, 0)}))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Path != "/base/ingest" || q.Get("name") != "svc{env=prod,region=eu-1}" || q.Get("from") != "100" ||
		q.Get("until") != "115" || q.Get("format") != "pprof" || q.Get("spyName") != "heaplens" {
		t.Errorf("ingest URL %s", u)
	}
}

func TestParseLabel(t *testing.T) {
	for _, tt := range []struct {
		in   string
		k, v string
		ok   bool
	}{
		{"env=prod", "env", "prod", true},
		{"k8s.pod=web-1", "k8s.pod", "web-1", true},
		{"a=b=c", "", "", false},
		{"env", "", "", false},
		{"env=", "", "", false},
		{"1x=y", "", "", false},
		{"__name__=memory", "", "", false},
		{"service_name=x", "", "", false},
		{"env=a,b", "", "", false},
		{"env=a}", "", "", false},
		{"sp ace=x", "", "", false},
	} {
		k, v, err := ParseLabel(tt.in)
		if (err == nil) != tt.ok || k != tt.k || v != tt.v {
			t.Errorf("ParseLabel(%q) = %q, %q, %v", tt.in, k, v, err)
		}
	}
	for app, ok := range map[string]bool{"svc": true, "my.app-1": true, "": false, "a{b}": false, "a b": false} {
		if err := CheckApp(app); (err == nil) != ok {
			t.Errorf("CheckApp(%q) = %v", app, err)
		}
	}
}
