package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of a Pusher.
const (
	DefaultPushEvery = 15 * time.Second
	DefaultMaxQueue  = 16 << 20 // bytes of gzipped profiles waiting to be sent
	maxBackoff       = 30 * time.Second
	pushTimeout      = 10 * time.Second
)

// sampleTypeConfig tells Pyroscope how to aggregate each sample type, as
// its Go SDK does for heap profiles (docs/fleet.md): alloc_* are
// per-interval deltas (summed over a range), inuse_* snapshots (averaged).
const sampleTypeConfig = `{"alloc_objects":{"units":"objects"},"alloc_space":{"units":"bytes"},` +
	`"inuse_objects":{"units":"objects","aggregation":"average"},"inuse_space":{"units":"bytes","aggregation":"average"}}`

// A Pusher sends the profile every period to a Pyroscope-compatible
// /ingest endpoint: one pprof per period with alloc_* holding what was
// allocated during the period and inuse_* what is live at its end.
// Profiles wait in a queue bounded by MaxQueue bytes while the server is
// down or slow; past it the oldest are dropped and counted. A 4xx answer
// drops the profile (the server will not take it later either); a 5xx
// answer or a network error is retried with exponential backoff.
type Pusher struct {
	URL      string            // the server, e.g. http://pyroscope:4040; /ingest is added
	App      string            // the application name, Pyroscope's service_name
	Labels   map[string]string // series labels, e.g. env=prod
	Every    time.Duration     // the period; 0 means DefaultPushEvery
	MaxQueue int               // 0 means DefaultMaxQueue
	Client   *http.Client      // nil means a client with a 10 s timeout
	Header   http.Header       // added to each request (authorization, X-Scope-OrgID)
	// OTLP, when set, sends OTLP/HTTP profiles to URL, the full profiles
	// endpoint, instead of pprof to URL/ingest.
	OTLP *OTLP
	// Log, when set, is told of the first refusal when it happens: a
	// refused profile is not retried, and the next are likely refused too.
	Log io.Writer

	p       *Profile
	backoff time.Duration // the first retry's wait; doubles up to maxBackoff
	mu      sync.Mutex
	queue   []*payload
	bytes   int // of the queue's bodies
	stats   PushStats
	prev    *Snapshot
	sending *payload // the queued profile being sent, nil between tries
	wake    chan struct{}
	halt    chan struct{} // closed by Stop: no more periodic profiles
	final   chan struct{} // closed by Stop after the last profile: one last try at what is queued
	ctx     context.Context
	abort   context.CancelFunc // at Stop's deadline
	done    sync.WaitGroup     // the sender
	taker   sync.WaitGroup     // the periodic profiles
}

// PushStats counts what happened to the profiles.
type PushStats struct {
	Pushed   int    // accepted by the server
	Rejected int    // refused with a 4xx status: dropped
	Dropped  int    // dropped because the queue was full, or still queued at Stop
	Retries  int    // failed attempts retried later
	Bytes    int64  // of the requests accepted (gzipped)
	LastErr  string // the last failure, "" if none
}

type payload struct {
	body        []byte
	from, until time.Time
}

// Start pushes p's profile every period until Stop.
func (ps *Pusher) Start(p *Profile) {
	ps.p = p
	if ps.Every <= 0 {
		ps.Every = DefaultPushEvery
	}
	if ps.MaxQueue <= 0 {
		ps.MaxQueue = DefaultMaxQueue
	}
	if ps.backoff == 0 {
		ps.backoff = time.Second
	}
	if ps.Client == nil {
		ps.Client = &http.Client{Timeout: pushTimeout}
	}
	ps.wake, ps.halt, ps.final = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	ps.ctx, ps.abort = context.WithCancel(context.Background())
	ps.done.Add(1)
	ps.taker.Add(1)
	go ps.produce()
	go ps.send()
}

// Stop takes a last profile and tries once more to send what is queued,
// until the first failure or the deadline; what is left then is dropped.
func (ps *Pusher) Stop(deadline time.Time) PushStats {
	close(ps.halt)
	ps.taker.Wait()
	ps.take()
	close(ps.final)
	t := time.AfterFunc(time.Until(deadline), ps.abort)
	ps.done.Wait()
	t.Stop()
	ps.abort()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.stats.Dropped += len(ps.queue)
	ps.queue, ps.bytes = nil, 0
	return ps.stats
}

// Stats returns the counts so far.
func (ps *Pusher) Stats() PushStats {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.stats
}

func (ps *Pusher) produce() {
	defer ps.taker.Done()
	t := time.NewTicker(ps.Every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ps.take()
		case <-ps.halt:
			return
		}
	}
}

// take queues the profile of the period that ends now.
func (ps *Pusher) take() {
	snap := ps.p.Snapshot(0)
	if snap.Capture.Meta.StartUnixNano == 0 {
		return // the command has not started yet
	}
	ps.mu.Lock()
	prev := ps.prev
	ps.prev = snap
	ps.mu.Unlock()
	from := time.Unix(0, snap.Capture.Meta.StartUnixNano)
	alloc := snap.Alloc
	if prev != nil {
		from = prev.Taken
		alloc = Delta(prev.Alloc, snap.Alloc)
	}
	cur := *snap
	cur.Alloc = alloc
	var body []byte
	var err error
	if ps.OTLP != nil {
		body, err = ps.OTLP.encode(&cur, from)
	} else {
		body, err = cur.PProf("live", from)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err != nil {
		ps.stats.Dropped++
		ps.stats.LastErr = err.Error()
		return
	}
	ps.queue = append(ps.queue, &payload{body: body, from: from, until: snap.Taken})
	ps.bytes += len(body)
	for ps.bytes > ps.MaxQueue && len(ps.queue) > 0 {
		// The profile being sent stays: it may yet arrive, and must not
		// count as both pushed and dropped.
		if ps.queue[0] == ps.sending {
			if len(ps.queue) == 1 {
				break
			}
			ps.bytes -= len(ps.queue[1].body)
			ps.queue = slices.Delete(ps.queue, 1, 2)
		} else {
			ps.pop()
		}
		ps.stats.Dropped++
	}
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

// pop removes the oldest queued profile; ps.mu is held.
func (ps *Pusher) pop() {
	ps.bytes -= len(ps.queue[0].body)
	ps.queue[0] = nil // the backing array must not keep it
	ps.queue = ps.queue[1:]
}

func (ps *Pusher) send() {
	defer ps.done.Done()
	backoff := time.Duration(0)
	for {
		ps.mu.Lock()
		var next *payload
		if len(ps.queue) > 0 {
			next = ps.queue[0]
		}
		ps.mu.Unlock()
		if next == nil {
			select {
			case <-ps.wake:
			case <-ps.final:
				ps.mu.Lock()
				empty := len(ps.queue) == 0
				ps.mu.Unlock()
				if empty {
					return
				}
			}
			continue
		}
		ps.mu.Lock()
		ps.sending = next
		ps.mu.Unlock()
		var retry bool
		var err error
		if ps.OTLP != nil {
			retry, err = ps.postOTLP(next)
		} else {
			retry, err = ps.post(next)
		}
		var partial *partialError
		ps.mu.Lock()
		ps.sending = nil
		switch {
		case err == nil || errors.As(err, &partial):
			ps.stats.Pushed++
			ps.stats.Bytes += int64(len(next.body))
		case retry:
			ps.stats.Retries++
		default:
			ps.stats.Rejected++
			if ps.stats.Rejected == 1 && ps.Log != nil {
				fmt.Fprintf(ps.Log, "heaplens: %v (not retried; the summary counts the refusals)\n", err)
			}
		}
		if err != nil {
			ps.stats.LastErr = err.Error()
		}
		if !retry && len(ps.queue) > 0 && ps.queue[0] == next {
			ps.pop()
		}
		ps.mu.Unlock()
		if !retry {
			backoff = 0
			continue
		}
		select {
		case <-ps.final:
			return // stopping: no time for retries
		default:
		}
		backoff = min(max(2*backoff, ps.backoff), maxBackoff)
		select {
		case <-time.After(backoff):
		case <-ps.final: // one last try now
		}
	}
}

// post sends one profile; retry says whether a failure is worth retrying.
func (ps *Pusher) post(pl *payload) (retry bool, err error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, err := mw.CreateFormFile("profile", "profile.pprof")
	if err == nil {
		_, err = part.Write(pl.body)
	}
	if err == nil {
		err = mw.WriteField("sample_type_config", sampleTypeConfig)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ps.ctx, http.MethodPost, ps.ingestURL(pl), &body)
	if err != nil {
		return false, err
	}
	for k, v := range ps.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := ps.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("pushing to %s: %w", ps.URL, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so that the connection is reused
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return false, nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		return false, fmt.Errorf("%s refused the profile: %s: %s", ps.URL, resp.Status, strings.TrimSpace(string(msg)))
	}
	return true, fmt.Errorf("pushing to %s: %s", ps.URL, resp.Status)
}

// ingestURL is POST /ingest?name=APP{k=v,…}&from&until&format=pprof&spyName,
// as Pyroscope's SDKs send it.
func (ps *Pusher) ingestURL(pl *payload) string {
	keys := make([]string, 0, len(ps.Labels))
	for k := range ps.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var name strings.Builder
	name.WriteString(ps.App)
	name.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			name.WriteByte(',')
		}
		name.WriteString(k + "=" + ps.Labels[k])
	}
	name.WriteByte('}')
	q := url.Values{}
	q.Set("name", name.String())
	q.Set("from", strconv.FormatInt(pl.from.Unix(), 10))
	q.Set("until", strconv.FormatInt(pl.until.Unix(), 10))
	q.Set("format", "pprof")
	q.Set("spyName", "heaplens")
	return strings.TrimRight(ps.URL, "/") + "/ingest?" + q.Encode()
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.]*$`)

// ParseLabel parses a --label k=v. Names are those Pyroscope keeps as
// they are; values cannot hold the characters that delimit labels in its
// name=APP{k=v,…} parameter.
func ParseLabel(kv string) (k, v string, err error) {
	k, v, ok := strings.Cut(kv, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("label %q: want NAME=VALUE", kv)
	case !labelName.MatchString(k) || strings.HasPrefix(k, "__") || k == "service_name":
		return "", "", fmt.Errorf("label %q: the name must be letters, digits, _ and ., not start with a digit or __, and not be service_name (that is --app)", kv)
	case v == "" || strings.ContainsAny(v, "{}=,\"\n\r"):
		return "", "", fmt.Errorf("label %q: the value must be non-empty and hold none of { } = , \" or a line break", kv)
	}
	return k, v, nil
}

// CheckApp says what is wrong with an application name.
func CheckApp(app string) error {
	if app == "" || strings.ContainsAny(app, "{}=,\"\n\r ") {
		return errors.New("the application name must be non-empty and hold none of { } = , \" or spaces")
	}
	return nil
}
