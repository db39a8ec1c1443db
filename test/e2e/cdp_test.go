package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A minimal Chrome DevTools Protocol client over a hand-written websocket
// (RFC 6455, client side: masked text frames out, unmasked frames in), so
// the browser tests need no dependency beyond Debian's chromium.

// browser is a headless Chromium with one page attached.
type browser struct {
	t    *testing.T
	cmd  *exec.Cmd
	conn net.Conn
	rd   *bufio.Reader
	id   int

	profileDir string
}

// chromiumPath finds Debian's chromium. scripts/deps.sh installs it, so its
// absence is a failure, not a reason to skip.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("chromium not found: the browser tests need it (scripts/deps.sh installs it: apt-get install chromium)")
	return ""
}

var devtoolsRE = regexp.MustCompile(`DevTools listening on (ws://[^\s]+)`)

// newBrowser starts headless Chromium with a window of w×h CSS pixels.
func newBrowser(t *testing.T, w, h int) *browser {
	t.Helper()
	profileDir, err := os.MkdirTemp("", "heaplens-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(chromiumPath(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--user-data-dir="+profileDir, "--remote-debugging-port=0",
		fmt.Sprintf("--window-size=%d,%d", w, h), "about:blank")
	// Its own process group, so that close ends its helper processes too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	b := &browser{t: t, cmd: cmd, profileDir: profileDir}
	t.Cleanup(b.close)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := devtoolsRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
	}()
	var wsURL string
	select {
	case wsURL = <-found:
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not print its DevTools URL within 30 s")
	}
	u, err := url.Parse(wsURL)
	if err != nil {
		t.Fatal(err)
	}
	// The page target: the about:blank tab chromium opened.
	var targets []struct {
		Type, WebSocketDebuggerURL string
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + u.Host + "/json/list")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
		}
		page := ""
		for _, tg := range targets {
			if tg.Type == "page" {
				page = tg.WebSocketDebuggerURL
			}
		}
		if page != "" {
			b.dial(page)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page target in chromium: %v %+v", err, targets)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.call("Page.enable", nil)
	b.call("Runtime.enable", nil)
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": w, "height": h, "deviceScaleFactor": 1, "mobile": false})
	return b
}

func (b *browser) close() {
	if b.conn != nil {
		b.conn.Close()
	}
	if b.cmd.Process != nil {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) // the group of the chromium we started
		b.cmd.Wait()
	}
	// Helpers may still be exiting: retry briefly, never fail on it.
	for range 20 {
		if os.RemoveAll(b.profileDir) == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dial opens the websocket of a DevTools target.
func (b *browser) dial(wsURL string) {
	u, err := url.Parse(wsURL)
	if err != nil {
		b.t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	var key [16]byte
	rand.Read(key[:])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, base64.StdEncoding.EncodeToString(key[:]))
	rd := bufio.NewReaderSize(conn, 1<<20)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		b.t.Fatalf("websocket handshake: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b.t.Fatalf("websocket handshake: %s", resp.Status)
	}
	b.conn, b.rd = conn, rd
}

// writeText sends one masked text frame.
func (b *browser) writeText(p []byte) error {
	hdr := []byte{0x81}
	switch n := len(p); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	out := make([]byte, len(p))
	for i := range p {
		out[i] = p[i] ^ mask[i%4]
	}
	_, err := b.conn.Write(append(hdr, out...))
	return err
}

// readMessage returns the next complete text or binary message, answering
// pings on the way.
func (b *browser) readMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(b.rd, h[:]); err != nil {
			return nil, err
		}
		fin, op := h[0]&0x80 != 0, h[0]&0x0f
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var x [2]byte
			if _, err := io.ReadFull(b.rd, x[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(x[:]))
		case 127:
			var x [8]byte
			if _, err := io.ReadFull(b.rd, x[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(x[:])
		}
		var mask [4]byte
		masked := h[1]&0x80 != 0
		if masked {
			if _, err := io.ReadFull(b.rd, mask[:]); err != nil {
				return nil, err
			}
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(b.rd, p); err != nil {
			return nil, err
		}
		if masked {
			for i := range p {
				p[i] ^= mask[i%4]
			}
		}
		switch op {
		case 0x8:
			return nil, io.EOF
		case 0x9: // ping: answer with a masked pong
			pong := append([]byte{0x8a, 0x80 | byte(len(p))}, 0, 0, 0, 0)
			b.conn.Write(append(pong, p...))
			continue
		case 0xa:
			continue
		}
		msg = append(msg, p...)
		if fin {
			return msg, nil
		}
	}
}

// call sends a CDP command and returns its result, skipping events.
func (b *browser) call(method string, params any) json.RawMessage {
	b.t.Helper()
	b.id++
	req, _ := json.Marshal(map[string]any{"id": b.id, "method": method, "params": params})
	b.conn.SetDeadline(time.Now().Add(60 * time.Second))
	if err := b.writeText(req); err != nil {
		b.t.Fatalf("CDP %s: %v", method, err)
	}
	for {
		m, err := b.readMessage()
		if err != nil {
			b.t.Fatalf("CDP %s: %v", method, err)
		}
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(m, &resp); err != nil {
			b.t.Fatalf("CDP %s: %v", method, err)
		}
		if resp.ID != b.id {
			continue // an event
		}
		if resp.Error != nil {
			b.t.Fatalf("CDP %s: %s", method, resp.Error.Message)
		}
		return resp.Result
	}
}

// eval evaluates a JavaScript expression (awaiting promises) and decodes
// its value into out, which may be nil.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	raw := b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		b.t.Fatal(err)
	}
	if r.ExceptionDetails != nil {
		b.t.Fatalf("evaluating %q: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("evaluating %q: %v (%s)", expr, err, r.Result.Value)
		}
	}
}

// navigate loads a URL and waits until cond (a JS expression) is truthy.
func (b *browser) navigate(u, cond string, timeout time.Duration) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": u})
	b.waitFor(cond, timeout)
}

// waitFor polls a JS expression until it is truthy.
func (b *browser) waitFor(cond string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		b.eval("!!("+cond+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			b.eval("document.body ? document.body.innerText.slice(0, 2000) : ''", &body)
			b.t.Fatalf("waited %v for %s; page shows:\n%s", timeout, cond, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// click sends a real mouse click at page coordinates.
func (b *browser) click(x, y float64) {
	b.t.Helper()
	for _, typ := range []string{"mouseMoved", "mousePressed", "mouseReleased"} {
		b.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "clickCount": 1})
	}
}

// screenshot saves a PNG of the whole page under test/artifacts (ignored
// by git) and returns its path.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	raw := b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true})
	var r struct {
		Data string `json:"data"`
	}
	json.Unmarshal(raw, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil || len(png) < 1000 {
		b.t.Fatalf("screenshot: %v (%d bytes)", err, len(png))
	}
	dir := filepath.Join(root, "test", "artifacts")
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}
