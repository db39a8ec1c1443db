package web

import (
	"bytes"
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
