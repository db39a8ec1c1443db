// Package docs checks the documentation as a reader meets it: the README
// stays short-winded and opens with the command that finds a Python leak,
// every reference from one document to another file of the repository
// resolves, and nothing in the repository points outside it.
package docs

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/heaplens/heaplens/test/testenv"
)

// maxWords is the longest paragraph a user-facing page may have (issue 37):
// past it, a reader skims.
const maxWords = 120

// firstScreen is the number of lines a reader sees before scrolling.
const firstScreen = 40

// userPages are the pages written for users, held to maxWords.
var userPages = []string{"README.md", "python/README.md"}

// markdownFiles lists the repository's documents: the READMEs and docs/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(testenv.Root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", testenv.Root, err)
	}
	files := []string{filepath.Join(testenv.Root, "README.md"), filepath.Join(testenv.Root, "python", "README.md")}
	return append(files, docs...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// paragraph is a run of prose: its first line (1-based) and its words.
type paragraph struct {
	line  int
	words int
	text  string
}

var listItem = regexp.MustCompile(`^\s*([-*+]|\d+\.)\s`)

// paragraphs splits Markdown into prose paragraphs. Code blocks, headings
// and tables are not prose; each list item is a paragraph of its own.
func paragraphs(md string) []paragraph {
	var out []paragraph
	var cur *paragraph
	end := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	fenced := false
	for i, line := range strings.Split(md, "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trim, "```"):
			end()
			fenced = !fenced
			continue
		case fenced || trim == "" || strings.HasPrefix(trim, "#") || strings.HasPrefix(trim, "|"):
			end()
			continue
		case listItem.MatchString(line):
			end()
		}
		if cur == nil {
			cur = &paragraph{line: i + 1}
		}
		cur.words += len(strings.Fields(listItem.ReplaceAllString(line, "")))
		cur.text += line + "\n"
	}
	end()
	return out
}

func TestParagraphs(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   string
		want []int // words per paragraph
	}{
		{"prose", "one two\nthree\n\nfour\n", []int{3, 1}},
		{"code is not prose", "a b\n```sh\nx y z\n\nw\n```\nc\n", []int{2, 1}},
		{"list items", "intro\n- a b\n  c\n- d\n1. e f\n", []int{1, 3, 1, 2}},
		{"headings and tables", "# T i t l e\ntext\n| a | b |\n", []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, p := range paragraphs(tc.md) {
				got = append(got, p.words)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("words per paragraph %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUserPagesShort fails on a paragraph of a user-facing page over
// maxWords words.
func TestUserPagesShort(t *testing.T) {
	for _, page := range userPages {
		ps := paragraphs(read(t, filepath.Join(testenv.Root, page)))
		if len(ps) == 0 {
			t.Errorf("%s: no paragraph found", page)
		}
		longest := 0
		for _, p := range ps {
			longest = max(longest, p.words)
			if p.words > maxWords {
				t.Errorf("%s:%d: a paragraph of %d words (at most %d):\n%s", page, p.line, p.words, maxWords, p.text)
			}
		}
		t.Logf("%s: %d paragraphs, the longest %d words", page, len(ps), longest)
	}
}

// TestReadmeFirstScreen checks that the README's first screen keeps its two
// commands and takes a Python user to a leak report: the command that
// makes one and an excerpt of what it prints.
func TestReadmeFirstScreen(t *testing.T) {
	lines := strings.Split(read(t, filepath.Join(testenv.Root, "README.md")), "\n")
	screen := strings.Join(lines[:min(firstScreen, len(lines))], "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^make demo\s`),
		regexp.MustCompile(`(?m)^make test\s`),
		regexp.MustCompile(`(?m)^(\S.* )?heaplens run -- python3 \S+\.py`),
		regexp.MustCompile(`(?m)^\s+top leak suspects`),
	} {
		if !want.MatchString(screen) {
			t.Errorf("README.md's first %d lines have no line matching %s", firstScreen, want)
		}
	}
}

var (
	// mdLink is a Markdown link or image: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// repoPath is a path of the repository written as code: `docs/views.md`.
	repoPath = regexp.MustCompile("`((?:docs|test|internal|preload|scripts|bench|cmd|python|examples|\\.ci)/[^`\\s]*)`")
	// placeholder marks a path written with a variable part (VERSION, PID, *).
	placeholder = regexp.MustCompile(`[*{}]|[A-Z]{3,}`)
)

// generated are paths the build or the tests make, named in the documents
// but never tracked.
var generated = []string{"bench/results/", "test/artifacts/", "bench/.venv", "python/heaplens/_", "build/"}

// TestDocLinks fails on a Markdown link to a file (or a heading of one) that
// does not exist, and on a repository path written as code that does not.
func TestDocLinks(t *testing.T) {
	headings := map[string]map[string]bool{}
	anchors := func(path string) map[string]bool {
		if headings[path] == nil {
			headings[path] = headingSlugs(read(t, path))
		}
		return headings[path]
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		rel, _ := filepath.Rel(testenv.Root, file)
		md := read(t, file)
		for n, line := range strings.Split(md, "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link to %s: %v", rel, n+1, target, err)
					continue
				}
				if anchor != "" && !anchors(dest)[anchor] {
					t.Errorf("%s:%d: link to %s: no heading with anchor #%s", rel, n+1, target, anchor)
				}
			}
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				path := strings.TrimRight(m[1], ".,:;")
				if placeholder.MatchString(path) || isGenerated(path) {
					continue
				}
				checked++
				if _, err := os.Stat(filepath.Join(testenv.Root, path)); err != nil {
					t.Errorf("%s:%d: names %s, which does not exist", rel, n+1, path)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d references checked: the patterns no longer match the documents", checked)
	}
	t.Logf("%d references checked", checked)
}

func isGenerated(path string) bool {
	for _, g := range generated {
		if strings.HasPrefix(path, g) {
			return true
		}
	}
	return false
}

// headingSlugs returns the anchors GitHub gives a document's headings:
// lower case, punctuation dropped, spaces as hyphens.
func headingSlugs(md string) map[string]bool {
	slugs := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slugs[b.String()] = true
	}
	return slugs
}

func TestHeadingSlugs(t *testing.T) {
	got := headingSlugs("# heaplens\n## Find a Python leak: one command\n```\n# not a heading\n```\n### `--rate` and RSS\n")
	for _, want := range []string{"heaplens", "find-a-python-leak-one-command", "--rate-and-rss"} {
		if !got[want] {
			t.Errorf("no slug %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a comment in a code block made a slug: %v", got)
	}
}

// TestNoOutsidePaths fails when any file of the repository points at the
// notes kept outside it (the design notes beside the clone), which a reader
// of the repository cannot follow.
func TestNoOutsidePaths(t *testing.T) {
	outside := [][]byte{[]byte("/work/" + "shared"), []byte("../" + "shared")}
	skip := map[string]bool{".git": true, "bin": true, "build": true, "dist": true, "artifacts": true, "results": true, ".venv": true, "__pycache__": true}
	files := 0
	err := filepath.WalkDir(testenv.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] && path != testenv.Root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
			return nil // a binary: a build output or a test's data
		}
		files++
		for _, o := range outside {
			if i := bytes.Index(b, o); i >= 0 {
				rel, _ := filepath.Rel(testenv.Root, path)
				t.Errorf("%s:%d: points outside the repository (%s)", rel, bytes.Count(b[:i], []byte("\n"))+1, o)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("only %d text files read under %s", files, testenv.Root)
	}
}
