package capture

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The docs name every record type: docs/capture-format.md in its table of
// types and with a section on its body, docs/architecture.md in its data
// model table, so that a type added in records.go cannot go unwritten.
func TestDocsNameEveryRecordType(t *testing.T) {
	format, err := os.ReadFile("../../docs/capture-format.md")
	if err != nil {
		t.Fatal(err)
	}
	arch, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, miss := range undocumented(string(format), string(arch)) {
		t.Error(miss)
	}
	// The check sees a row that goes missing.
	stale := regexp.MustCompile(`(?m)^\| Mark \|.*\n`).ReplaceAllString(string(arch), "")
	if got := undocumented(string(format), stale); len(got) != 1 || !strings.Contains(got[0], "Mark") {
		t.Errorf("without its Mark row, docs/architecture.md misses %q", got)
	}
}

// undocumented says which record types the docs do not name.
func undocumented(format, arch string) []string {
	var out []string
	_, model, _ := strings.Cut(arch, "## Data model")
	model, _, _ = strings.Cut(model, "\n## ")
	rows := map[string]bool{} // the first cell of every row, split at " / "
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+?) \|`).FindAllStringSubmatch(model, -1) {
		for _, name := range strings.Split(m[1], " / ") {
			rows[name] = true
		}
	}
	for i := range recordTypes {
		typ := RecordType(i)
		if !typ.known() {
			continue
		}
		name := typ.String()
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^\| %d +\| %s +\|$`, i, name)).MatchString(format) {
			out = append(out, fmt.Sprintf("docs/capture-format.md: the table of record types lacks | %d | %s |", i, name))
		}
		if !strings.Contains(format, fmt.Sprintf("**%s (%d)**", name, i)) {
			out = append(out, fmt.Sprintf("docs/capture-format.md: no section **%s (%d)** on its body", name, i))
		}
		if !rows[name] {
			out = append(out, "docs/architecture.md: the data model table has no row for "+name)
		}
	}
	return out
}
