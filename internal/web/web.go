// Package web renders heaplens views as a self-contained HTML report and
// serves them as a local web UI (`heaplens serve`, `heaplens run --live`).
// The page (assets/) is plain JavaScript and CSS written for heaplens: no
// framework, no network access, so a report opens anywhere, offline.
package web

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/heaplens/heaplens/internal/export"
)

//go:embed assets/report.html
var pageHTML string

//go:embed assets/report.css
var pageCSS string

//go:embed assets/report.js
var pageJS string

// Mode tells the page where its data comes from.
type Mode struct {
	Server   bool   `json:"server"`             // fetch views from api/profile
	Live     bool   `json:"live"`               // poll for updates while the target runs
	View     string `json:"view"`               // the view selected first
	Interval int    `json:"interval,omitempty"` // live polling period, ms
}

// page assembles the page. data is the JSON document, or "" when the page
// fetches it from the server.
func page(data []byte, mode Mode) (string, error) {
	m, err := json.Marshal(mode)
	if err != nil {
		return "", err
	}
	// encoding/json escapes <, > and & in strings, so the data cannot close
	// its <script> element.
	r := strings.NewReplacer(
		"/*HEAPLENS_CSS*/", pageCSS,
		"/*HEAPLENS_JS*/", pageJS,
		"/*HEAPLENS_MODE*/", string(m),
		"/*HEAPLENS_DATA*/", string(data),
	)
	return r.Replace(pageHTML), nil
}

// The HTML page is a format of heaplens report like the others; it is
// defined here, with the page's assets.
func init() {
	export.RegisterFormat(&export.Format{Name: "html", NeedsFile: true,
		Usage: "one offline HTML page: flame graph, top table, timeline (open it in a browser; it needs no network)",
		Write: func(w io.Writer, r *export.Result, _ export.WriteOptions) error { return WriteHTML(w, r.Doc()) }})
}

// WriteHTML writes one self-contained HTML report of a view: flame graph,
// top table, timeline and header, with the data embedded.
func WriteHTML(w io.Writer, d *export.Doc) error {
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	s, err := page(data, Mode{View: d.View})
	if err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	if _, err := io.WriteString(w, s); err != nil {
		return fmt.Errorf("writing html report: %w", err)
	}
	return nil
}
