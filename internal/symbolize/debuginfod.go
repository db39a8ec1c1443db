package symbolize

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heaplens/heaplens/internal/privdir"
)

// DebuginfodClient fetches the debug files that no debug root holds, by
// build ID, from debuginfod servers, as gdb, perf and valgrind do; a Cache
// asks it last (Cache.Debuginfod). NewDebuginfod reads the same
// environment variables as elfutils' client. Downloads
// are kept under Root in the build-ID layout of a debug root
// (Root/.build-id/xx/rest.debug), so a later run finds them without
// asking.
type DebuginfodClient struct {
	URLs    []string      // servers, asked in order
	Root    string        // where downloads are kept
	Timeout time.Duration // for one request, connection to last byte
	MaxSize int64         // bytes; a larger debug file is not fetched

	mu     sync.Mutex
	missed map[string]bool // build IDs no server had, not asked again
}

// NewDebuginfod returns a client for the servers in DEBUGINFOD_URLS
// (space-separated), with DEBUGINFOD_TIMEOUT (seconds, default 30) and
// DEBUGINFOD_MAXSIZE (bytes, default 2 GiB), keeping downloads under root;
// nil when DEBUGINFOD_URLS names no server or root is "".
func NewDebuginfod(root string) *DebuginfodClient {
	var urls []string
	for _, u := range strings.Fields(os.Getenv("DEBUGINFOD_URLS")) {
		if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
			urls = append(urls, strings.TrimRight(u, "/"))
		}
	}
	if len(urls) == 0 || root == "" {
		return nil
	}
	d := &DebuginfodClient{URLs: urls, Root: root, Timeout: 30 * time.Second, MaxSize: 2 << 30, missed: map[string]bool{}}
	if s, err := strconv.Atoi(os.Getenv("DEBUGINFOD_TIMEOUT")); err == nil && s > 0 {
		d.Timeout = time.Duration(s) * time.Second
	}
	if n, err := strconv.ParseInt(os.Getenv("DEBUGINFOD_MAXSIZE"), 10, 64); err == nil && n > 0 {
		d.MaxSize = n
	}
	return d
}

// path is where the debug file of build ID id is kept.
func (d *DebuginfodClient) path(id string) string {
	return filepath.Join(d.Root, ".build-id", id[:2], id[2:]+".debug")
}

// fetch returns the path of the debug file of build ID id, downloading it
// from the first server that has it; "" when none does. What a server
// sends is checked by the caller like any candidate debug file (ELF, DWARF,
// the same build ID).
func (d *DebuginfodClient) fetch(id string) string {
	if len(id) < 4 || len(id) > 128 || strings.Trim(id, "0123456789abcdef") != "" {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Downloads are trusted, and kept, only in a directory of ours that no
	// one else can write.
	if privdir.EnsureAll(d.Root, 0o700) != nil {
		return ""
	}
	p := d.path(id)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if d.missed[id] {
		return ""
	}
	for _, u := range d.URLs {
		if err := d.download(u+"/buildid/"+id+"/debuginfo", p); err == nil {
			return p
		}
	}
	d.missed[id] = true
	return ""
}

var errTooLarge = errors.New("larger than DEBUGINFOD_MAXSIZE")

func (d *DebuginfodClient) download(url, dst string) error {
	client := &http.Client{Timeout: d.Timeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if resp.ContentLength > d.MaxSize {
		return errTooLarge
	}
	if err := privdir.EnsureAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fetch-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, d.MaxSize+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case n > d.MaxSize:
		return errTooLarge
	}
	return os.Rename(tmp.Name(), dst)
}
