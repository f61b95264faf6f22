package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagInUsage reports whether usage names the flag (--name, or -name for a one-letter flag).
func flagInUsage(usage, name string) bool {
	re := regexp.MustCompile(`(^|[\s\[|])--?` + regexp.QuoteMeta(name) + `($|[\s\]|=.])`)
	return re.MatchString(usage)
}

// TestCommandTable: every command of the table has a one-line summary and a usage line that
// names every flag its flag set defines (router help, router CMD --help, the man page and
// the completions all come from the table and the flag sets, so a flag missing there is
// missing everywhere).
func TestCommandTable(t *testing.T) {
	for _, c := range describe() {
		if c.Summary == "" || strings.Contains(c.Summary, "\n") {
			t.Errorf("router %s: summary %q, want one line", c.Name, c.Summary)
		}
		if strings.Contains(c.Usage, "\n") {
			t.Errorf("router %s: usage %q, want one line", c.Name, c.Usage)
		}
		for _, f := range c.Flags {
			if !flagInUsage(c.Usage, f.Name) {
				t.Errorf("router %s: the usage line %q does not name --%s", c.Name, c.Usage, f.Name)
			}
		}
	}
}

// guideCommands returns the command column of docs/guide.md's "## Commands" table: each
// row's first cell, without its backquotes, with \| read as |.
func guideCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## Commands\n")
	if !ok {
		t.Fatal(`docs/guide.md has no "## Commands" section`)
	}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if !strings.HasPrefix(l, "| `router ") {
			continue
		}
		cell, _, ok := strings.Cut(strings.TrimPrefix(l, "| `"), "` |")
		if !ok {
			t.Fatalf("docs/guide.md: a row whose first cell is not one code span: %s", l)
		}
		out = append(out, strings.ReplaceAll(cell, `\|`, "|"))
	}
	return out
}

// TestGuideCommandsMatchTable: docs/guide.md lists the commands of the table, each once,
// with the table's usage line.
func TestGuideCommandsMatchTable(t *testing.T) {
	var want []string
	for _, c := range commands() {
		want = append(want, strings.TrimSpace("router "+c.name+" "+c.usage))
	}
	got := guideCommands(t)
	for _, w := range want {
		if n := count(got, w); n != 1 {
			t.Errorf("docs/guide.md lists `%s` %d times, want once", w, n)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("docs/guide.md lists `%s`, which the command table does not", g)
		}
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
