package fleet

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	collpb "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	"google.golang.org/protobuf/proto"

	"github.com/heaplens/heaplens/internal/export"
)

// otlpReceiver answers each request with the next status of a script (the
// last one repeats) and keeps the requests it accepted, decoded.
type otlpReceiver struct {
	mu       sync.Mutex
	statuses []int
	calls    int
	got      []*collpb.ExportProfilesServiceRequest
	errs     []string
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.statuses[min(r.calls, len(r.statuses)-1)]
	r.calls++
	if st != 200 {
		http.Error(w, "no", st)
		return
	}
	if req.URL.Path != "/v1development/profiles" || req.Header.Get("Content-Type") != "application/x-protobuf" ||
		req.Header.Get("Content-Encoding") != "gzip" || req.Header.Get("Api-Key") != "k=1" {
		r.errs = append(r.errs, req.URL.Path+" "+req.Header.Get("Content-Type")+" "+req.Header.Get("Content-Encoding")+" "+req.Header.Get("Api-Key"))
		http.Error(w, "bad request", 400)
		return
	}
	zr, err := gzip.NewReader(req.Body)
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return
	}
	b, _ := io.ReadAll(zr)
	m := &collpb.ExportProfilesServiceRequest{}
	if err := proto.Unmarshal(b, m); err != nil {
		r.errs = append(r.errs, err.Error())
		return
	}
	r.got = append(r.got, m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collpb.ExportProfilesServiceResponse{})
	w.Write(out)
}

func startOTLP(t *testing.T, r *otlpReceiver, log io.Writer) *Pusher {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	p := New()
	writeCapture(t, 1, p)
	ps := &Pusher{URL: OTLPEndpoint(srv.URL + "/"), Every: 20 * time.Millisecond, backoff: 20 * time.Millisecond,
		Header: http.Header{"Api-Key": {"k=1"}}, Log: log,
		OTLP: &OTLP{Resource: []export.KeyValue{{Key: export.AttrServiceName, Value: "svc"}}, Version: "test"}}
	ps.Start(p)
	return ps
}

func TestOTLPPushRetriesThenDelivers(t *testing.T) {
	r := &otlpReceiver{statuses: []int{503, 429, 200}}
	ps := startOTLP(t, r, nil)
	time.Sleep(300 * time.Millisecond)
	st := ps.Stop(time.Now().Add(5 * time.Second))
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Fatalf("the receiver saw bad requests: %v", r.errs)
	}
	if st.Retries != 2 || st.Pushed < 3 || st.Pushed != len(r.got) || st.Dropped != 0 || st.Rejected != 0 || st.Bytes == 0 {
		t.Fatalf("stats %+v, receiver got %d", st, len(r.got))
	}
	// The windows follow each other from the run's start, and their
	// alloc_space adds up to everything allocated.
	var allocated int64
	var until uint64 = 1
	for i, req := range r.got {
		ps := req.ResourceProfiles[0].ScopeProfiles[0].Profiles
		if len(ps) != 4 {
			t.Fatalf("request %d: %d profiles", i, len(ps))
		}
		if ps[1].TimeUnixNano != until {
			t.Errorf("request %d starts at %d, not where the previous ended (%d)", i, ps[1].TimeUnixNano, until)
		}
		until = ps[1].TimeUnixNano + ps[1].DurationNano
		if typ := req.Dictionary.StringTable[ps[1].SampleType.TypeStrindex]; typ != "alloc_space" {
			t.Fatalf("request %d: profile 1 is %s", i, typ)
		}
		for _, s := range ps[1].Samples {
			allocated += s.Values[0]
		}
	}
	want := New()
	writeCapture(t, 1, want)
	if total := int64(want.Snapshot(0).Alloc.TotalBytes); allocated != total {
		t.Errorf("the requests' alloc_space adds up to %d, want the %d allocated", allocated, total)
	}
}

func TestOTLPRefusedNamedOnce(t *testing.T) {
	r := &otlpReceiver{statuses: []int{400}}
	var log bytes.Buffer
	ps := startOTLP(t, r, &log)
	time.Sleep(200 * time.Millisecond)
	st := ps.Stop(time.Now().Add(5 * time.Second))
	if st.Rejected < 3 || st.Retries != 0 || st.Pushed != 0 || !strings.Contains(st.LastErr, "400") {
		t.Errorf("always 400: %+v", st)
	}
	if n := strings.Count(log.String(), "refused"); n != 1 {
		t.Errorf("the refusal is named %d times:\n%s", n, log.String())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls != st.Rejected {
		t.Errorf("%d requests for %d refusals: refusals are not retried", r.calls, st.Rejected)
	}
}

func TestReadOTLPEnv(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want OTLPEnv
		err  bool
	}{
		{"nothing", nil, OTLPEnv{Headers: map[string]string{}}, false},
		{"base endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"},
			OTLPEnv{Endpoint: "http://c:4318/v1development/profiles", Headers: map[string]string{}}, false},
		{"profiles endpoint as is", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": "http://p:9/x"},
			OTLPEnv{Endpoint: "http://p:9/x", Headers: map[string]string{}}, false},
		{"headers, percent-decoded", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b, x-tenant = t1"},
			OTLPEnv{Headers: map[string]string{"api-key": "a b", "x-tenant": "t1"}}, false},
		{"resource, service.name apart", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=web,team=a%2Cb"},
			OTLPEnv{Headers: map[string]string{}, ServiceName: "web",
				Resource: []export.KeyValue{{Key: "deployment.environment", Value: "prod"}, {Key: "team", Value: "a,b"}}}, false},
		{"OTEL_SERVICE_NAME wins", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=web", "OTEL_SERVICE_NAME": "api"},
			OTLPEnv{Headers: map[string]string{}, ServiceName: "api"}, false},
		{"bad header", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, OTLPEnv{}, true},
		{"bad escape", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=%zz"}, OTLPEnv{}, true},
	} {
		got, err := ReadOTLPEnv(func(k string) string { return tt.env[k] })
		if (err != nil) != tt.err {
			t.Errorf("%s: error %v", tt.name, err)
			continue
		}
		if !tt.err && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestOTLPStatusMessage(t *testing.T) {
	// A google.rpc.Status: code 3 (field 1), message "bad profile" (field 2).
	status := append([]byte{0x08, 0x03, 0x12, 11}, "bad profile"...)
	for _, tt := range []struct {
		body []byte
		ct   string
		want string
	}{
		{status, "application/x-protobuf", "bad profile"},
		{[]byte("plain words"), "text/plain", "plain words"},
		{[]byte{0x12, 0x7f}, "application/x-protobuf", "\x12\x7f"}, // truncated: shown raw, not read past its end
	} {
		if got := otlpStatus(tt.body, tt.ct); got != tt.want {
			t.Errorf("otlpStatus(%q, %s) = %q, want %q", tt.body, tt.ct, got, tt.want)
		}
	}
}
