package fleet

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	collpb "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	"google.golang.org/protobuf/proto"

	"github.com/heaplens/heaplens/internal/export"
)

// OTLPProfilesPath is where an OTLP/HTTP receiver takes profiles, below
// the base URL of OTEL_EXPORTER_OTLP_ENDPOINT (the profiles signal is still
// in development, hence the path).
const OTLPProfilesPath = "/v1development/profiles"

// maxOTLPResponse bounds what is read of a receiver's answer.
const maxOTLPResponse = 64 << 10

// OTLP makes a Pusher send OTLP/HTTP profiles (an
// ExportProfilesServiceRequest, protobuf, gzipped) to its URL, the full
// profiles endpoint, instead of pprof to /ingest.
type OTLP struct {
	// Resource attributes other than the process's: service.name,
	// host.name, and those of OTEL_RESOURCE_ATTRIBUTES.
	Resource    []export.KeyValue
	CommandLine bool   // add process.command_line (opt-in: it may hold secrets)
	Version     string // heaplens's, the instrumentation scope's version
}

// encode is the OTLP request of one period, gzipped.
func (o *OTLP) encode(s *Snapshot, from time.Time) ([]byte, error) {
	res := append([]export.KeyValue(nil), o.Resource...)
	res = append(res, export.ProcessAttributes(s.Capture, o.CommandLine)...)
	req := export.OTLPProfiles(s.Capture, s.Alloc, s.Inuse, from, s.Taken.Sub(from), res, o.Version)
	raw, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding OTLP profiles: %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("compressing OTLP profiles: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing OTLP profiles: %w", err)
	}
	return buf.Bytes(), nil
}

// postOTLP sends one request as OTLP/HTTP says: 2xx is success (a partial
// success names what the receiver dropped), 429, 502, 503 and 504 are
// worth retrying, as are a network error, 408 and other 5xx (the same
// rules as the Pyroscope push); any other 4xx is a refusal.
func (ps *Pusher) postOTLP(pl *payload) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ps.ctx, http.MethodPost, ps.URL, bytes.NewReader(pl.body))
	if err != nil {
		return false, fmt.Errorf("OTLP request to %s: %w", ps.URL, err)
	}
	for k, v := range ps.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := ps.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("exporting to %s: %w", ps.URL, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOTLPResponse))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxOTLPResponse)) // so that the connection is reused
	resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code/100 == 2:
		var r collpb.ExportProfilesServiceResponse
		if proto.Unmarshal(body, &r) == nil && r.PartialSuccess != nil && (r.PartialSuccess.RejectedProfiles > 0 || r.PartialSuccess.ErrorMessage != "") {
			return false, &partialError{fmt.Sprintf("%s took the profiles but rejected %d: %s", ps.URL, r.PartialSuccess.RejectedProfiles, clip(r.PartialSuccess.ErrorMessage))}
		}
		return false, nil
	case code/100 == 4 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout:
		hint := ""
		if code == http.StatusNotFound {
			// What a Collector answers when no pipeline takes profiles.
			hint = " (a Collector needs a profiles pipeline and --feature-gates=+service.profilesSupport)"
		}
		return false, fmt.Errorf("%s refused the profiles: %s: %s%s", ps.URL, resp.Status, clip(otlpStatus(body, resp.Header.Get("Content-Type"))), hint)
	}
	return true, fmt.Errorf("exporting to %s: %s", ps.URL, resp.Status)
}

// partialError is a 2xx answer that dropped some of the request: it was
// delivered, and the receiver's complaint is worth showing.
type partialError struct{ msg string }

func (e *partialError) Error() string { return e.msg }

// otlpStatus is the message of an OTLP error answer: a google.rpc.Status in
// protobuf, whose field 2 is the message, or plain text.
func otlpStatus(body []byte, contentType string) string {
	if strings.HasPrefix(contentType, "application/x-protobuf") || strings.HasPrefix(contentType, "application/protobuf") {
		if msg, ok := protoStringField(body, 2); ok {
			return msg
		}
	}
	return string(body)
}

// protoStringField finds a top-level length-delimited field in a protobuf
// message without its schema.
func protoStringField(b []byte, field int) (string, bool) {
	for len(b) > 0 {
		tag, n := uvarint(b)
		if n <= 0 {
			return "", false
		}
		b = b[n:]
		switch tag & 7 {
		case 0:
			_, n = uvarint(b)
			if n <= 0 {
				return "", false
			}
			b = b[n:]
		case 2:
			l, n := uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return "", false
			}
			if int(tag>>3) == field {
				return string(b[n : n+int(l)]), true
			}
			b = b[n+int(l):]
		default:
			return "", false
		}
	}
	return "", false
}

func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// clip keeps an error message to a line of reasonable length.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// OTLPEnv is what the OpenTelemetry SDK environment variables say about
// exporting profiles.
type OTLPEnv struct {
	Endpoint    string            // the profiles endpoint's full URL, "" if unset
	Headers     map[string]string // OTEL_EXPORTER_OTLP_HEADERS
	ServiceName string            // OTEL_SERVICE_NAME, else service.name of OTEL_RESOURCE_ATTRIBUTES
	Resource    []export.KeyValue // OTEL_RESOURCE_ATTRIBUTES but service.name, in order
}

// ReadOTLPEnv reads the standard variables (getenv is os.Getenv in use):
// OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT as it is, or
// OTEL_EXPORTER_OTLP_ENDPOINT plus /v1development/profiles;
// OTEL_EXPORTER_OTLP_PROFILES_HEADERS, else OTEL_EXPORTER_OTLP_HEADERS;
// OTEL_SERVICE_NAME; OTEL_RESOURCE_ATTRIBUTES.
func ReadOTLPEnv(getenv func(string) string) (OTLPEnv, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var e OTLPEnv
	if v := getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"); v != "" {
		e.Endpoint = v
	} else if v := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		e.Endpoint = OTLPEndpoint(v)
	}
	h := getenv("OTEL_EXPORTER_OTLP_PROFILES_HEADERS")
	if h == "" {
		h = getenv("OTEL_EXPORTER_OTLP_HEADERS")
	}
	var err error
	if e.Headers, err = parseKVList(h); err != nil {
		return e, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	attrs, err := parseKVList(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return e, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	for _, kv := range splitKV(getenv("OTEL_RESOURCE_ATTRIBUTES")) {
		k, _, _ := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if k == export.AttrServiceName {
			e.ServiceName = attrs[k]
		} else if k != "" {
			e.Resource = append(e.Resource, export.KeyValue{Key: k, Value: attrs[k]})
		}
	}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		e.ServiceName = v
	}
	return e, nil
}

// OTLPEndpoint is the profiles endpoint below a base URL, as
// OTEL_EXPORTER_OTLP_ENDPOINT is: http://collector:4318 gives
// http://collector:4318/v1development/profiles.
func OTLPEndpoint(base string) string {
	return strings.TrimRight(base, "/") + OTLPProfilesPath
}

// CheckOTLPEndpoint says what is wrong with an endpoint URL.
func CheckOTLPEndpoint(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL", u)
	}
	return nil
}

func splitKV(s string) []string {
	var out []string
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) != "" {
			out = append(out, kv)
		}
	}
	return out
}

// parseKVList parses the W3C Baggage-like list of the OTel environment
// variables: key=value pairs separated by commas, values percent-encoded.
func parseKVList(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range splitKV(s) {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want KEY=VALUE", strings.TrimSpace(kv))
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}
