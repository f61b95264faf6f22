//go:build !windows

package notices_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	noticesPath = "../../THIRD_PARTY_NOTICES.md"
	licensesDir = "../../docs/licenses"
	mainPkg     = "github.com/agentcage/router/cmd/router"
	// stdRow names the standard library's row of the table and its section heading.
	stdRow = "Go standard library and runtime"
)

// targets are the binaries the notices speak for, by the table's "in" column.
var targets = []struct{ goos, in string }{{"linux", "Linux"}, {"windows", "Windows"}}

// noLicenseFile names the modules known to ship no license file, with what the notices say
// instead; any other module without one fails the test.
var noLicenseFile = map[string]string{
	"github.com/mattn/go-localereader": "its README says MIT; the notices quote the MIT terms",
}

// notLinked names license files that the directory walk finds but that cover nothing the
// binaries link, while the package named is not linked. crypto/internal/boring/LICENSE says
// the Go files beside it are under the Go license and the rest of it covers BoringSSL's
// object file, which only a GOEXPERIMENT=boringcrypto build links (through that package).
var notLinked = map[string]string{
	"crypto/internal/boring/LICENSE": "crypto/internal/boring/syso",
}

// legalPrefixes start the names (case-insensitive) of the files quoted for each module.
var legalPrefixes = []string{"license", "licence", "copying", "notice", "patents", "authors"}

// grantPhrases mark a source file whose header carries a license of its own.
var grantPhrases = []string{"Permission is hereby granted", "Redistributions of source code"}

type module struct {
	Path, Version, Dir string
	Main               bool
	Replace            *module
}

type pkg struct {
	ImportPath, Dir                   string
	Standard                          bool
	Module                            *module
	GoFiles, CgoFiles, SFiles, CFiles []string
}

// linked is what go list says one target links.
type linked struct {
	pkgs    []pkg
	modules map[string]string // path -> version, the main module left out
}

type row struct{ version, license, in string }

// notices is THIRD_PARTY_NOTICES.md taken apart.
type notices struct {
	text     string
	table    map[string]row  // module path (or stdRow) -> row
	headings map[string]bool // names in "### a, b" headings
	blocks   map[string]bool // normalized contents of fenced blocks
	flat     string          // the whole text with whitespace collapsed
}

func TestTableMatchesLinkedModules(t *testing.T) {
	n := readNotices(t)
	goVersion, _ := goEnv(t)
	want := map[string]row{stdRow: {version: goVersion, in: "both"}}
	for _, tg := range targets {
		for path, version := range list(t, tg.goos).modules {
			r, ok := want[path]
			if ok && r.version != version {
				t.Errorf("%s: linux and windows link different versions (%s, %s)", path, r.version, version)
			}
			if ok {
				r.in = "both"
			} else {
				r = row{version: version, in: tg.in}
			}
			want[path] = r
		}
	}
	for _, path := range slices.Sorted(maps.Keys(want)) {
		w := want[path]
		got, ok := n.table[path]
		switch {
		case !ok:
			t.Errorf("%s %s (%s) is linked but not in the table", path, w.version, w.in)
		case got.version != w.version:
			t.Errorf("%s: table says %s, the binaries link %s", path, got.version, w.version)
		case got.in != w.in:
			t.Errorf("%s: table says in %q, it is in %q", path, got.in, w.in)
		}
		if !n.headings[path] {
			t.Errorf("%s: no ### heading names it", path)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(n.table)) {
		if _, ok := want[path]; !ok {
			t.Errorf("%s is in the table but neither binary links it", path)
		}
	}
}

func TestLicenseFilesQuoted(t *testing.T) {
	n := readNotices(t)
	_, goroot := goEnv(t)
	standard := map[string]string{} // normalized text -> docs/licenses file name
	entries, err := os.ReadDir(licensesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(licensesDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		standard[normalize(string(b))] = e.Name()
	}

	files := map[string]string{} // license file -> module path (or stdRow)
	hasFile := map[string]bool{}
	linkedPkgs, linkedMods := map[string]bool{}, map[string]bool{stdRow: true}
	for _, tg := range targets {
		l := list(t, tg.goos)
		for m := range l.modules {
			linkedMods[m] = true
		}
		for _, p := range l.pkgs {
			linkedPkgs[p.ImportPath] = true
			owner, root := stdRow, filepath.Join(goroot, "src")
			if !p.Standard {
				if p.Module == nil || p.Module.Main {
					continue
				}
				owner, root = p.Module.Path, p.Module.Dir
			}
			found, err := legalFiles(p.Dir, root)
			if err != nil {
				t.Fatalf("%s: %v", p.ImportPath, err)
			}
			for _, f := range found {
				files[f] = owner
				hasFile[owner] = true
			}
		}
	}
	for _, name := range []string{"LICENSE", "PATENTS"} {
		files[filepath.Join(goroot, name)] = stdRow
	}

	for rel, pkg := range notLinked {
		f := filepath.Join(goroot, "src", filepath.FromSlash(rel))
		if _, ok := files[f]; !ok {
			t.Errorf("%s is no longer found: drop it from notLinked", rel)
		}
		if !linkedPkgs[pkg] {
			delete(files, f)
		}
	}
	for _, f := range slices.Sorted(maps.Keys(files)) {
		owner := files[f]
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := normalize(string(b))
		if n.blocks[text] {
			continue
		}
		if name, ok := standard[text]; ok && strings.Contains(n.text, "docs/licenses/"+name) {
			continue
		}
		t.Errorf("%s: %s is neither quoted in a fenced block nor a docs/licenses text the notices point at", owner, f)
	}
	for _, path := range slices.Sorted(maps.Keys(n.table)) {
		why, known := noLicenseFile[path]
		switch {
		case path == stdRow || !linkedMods[path]: // TestTableMatchesLinkedModules reports the latter
		case !hasFile[path] && !known:
			t.Errorf("%s ships no license file: say what its license is and add it to noLicenseFile", path)
		case hasFile[path] && known:
			t.Errorf("%s now ships a license file: quote it and drop it from noLicenseFile (%s)", path, why)
		}
	}
}

func TestLicenseHeadersQuoted(t *testing.T) {
	n := readNotices(t)
	seen := map[string]bool{}
	for _, tg := range targets {
		for _, p := range list(t, tg.goos).pkgs {
			if p.Module != nil && p.Module.Main {
				continue
			}
			for _, name := range slices.Concat(p.GoFiles, p.CgoFiles, p.SFiles, p.CFiles) {
				f := filepath.Join(p.Dir, name)
				if seen[f] {
					continue
				}
				seen[f] = true
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				lines, err := headerCopyrights(b)
				if err != nil {
					t.Errorf("%s: %v", f, err)
				}
				for _, l := range lines {
					if !strings.Contains(n.flat, l) {
						t.Errorf("%s carries a license of its own; quote its header (%q is missing)", f, l)
					}
				}
			}
		}
	}
}

func TestNormalizeAndHeaders(t *testing.T) {
	if got, want := normalize("\r\n a \t\r\nb\n\n"), " a\nb"; got != want {
		t.Errorf("normalize: got %q, want %q", got, want)
	}
	src := "// Copyright 2009 The Go Authors.\n//\n// Use of this source code is governed by a BSD-style license.\npackage x\n"
	if got, err := headerCopyrights([]byte(src)); err != nil || len(got) != 0 {
		t.Errorf("plain Go header: got %q, %v", got, err)
	}
	src = "/*\n * Copyright (c) 2001 A\n *   Copyright  2002 B\n *\n * Permission is hereby granted, free of charge\n */\n"
	got, err := headerCopyrights([]byte(src))
	if want := []string{"Copyright (c) 2001 A", "Copyright 2002 B"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("MIT header: got %q, %v, want %q", got, err, want)
	}
	if _, err := headerCopyrights([]byte("// Redistributions of source code must retain\n")); err == nil {
		t.Error("a grant without a copyright line: no error")
	}
}

// headerCopyrights returns the copyright lines (comment markers and extra spaces removed)
// that stand in the 12 lines before each license grant in src, and an error for a grant with
// none there.
func headerCopyrights(src []byte) ([]string, error) {
	lines := strings.Split(string(src), "\n")
	var out []string
	for i, l := range lines {
		if !slices.ContainsFunc(grantPhrases, func(p string) bool { return strings.Contains(l, p) }) {
			continue
		}
		found := false
		for _, c := range lines[max(0, i-12):i] {
			if strings.Contains(c, "Copyright") {
				c = strings.TrimLeft(strings.TrimSpace(c), "/*#; \t")
				out = append(out, strings.Join(strings.Fields(c), " "))
				found = true
			}
		}
		if !found {
			return out, fmt.Errorf("line %d grants a license, but no copyright line stands above it", i+1)
		}
	}
	return out, nil
}

// legalFiles returns the license-like files in dir and its parents up to root.
func legalFiles(dir, root string) ([]string, error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s is not inside %s", dir, root)
	}
	var out []string
	for {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			name := strings.ToLower(e.Name())
			if e.Type().IsRegular() && slices.ContainsFunc(legalPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
		if dir == root {
			return out, nil
		}
		dir = filepath.Dir(dir)
	}
}

// normalize makes texts comparable across copies: LF line ends, no trailing spaces on a
// line, no blank lines around the text.
func normalize(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

func readNotices(t *testing.T) *notices {
	t.Helper()
	b, err := os.ReadFile(noticesPath)
	if err != nil {
		t.Fatal(err)
	}
	n, err := parseNotices(string(b))
	if err != nil {
		t.Fatalf("%s: %v", noticesPath, err)
	}
	return n
}

// parseNotices reads the module table (the one headed "| module | version | license | in |"),
// the ### headings and the fenced blocks.
func parseNotices(text string) (*notices, error) {
	n := &notices{text: text, table: map[string]row{}, headings: map[string]bool{}, blocks: map[string]bool{},
		flat: strings.Join(strings.Fields(text), " ")}
	var block []string
	inBlock, tableAt := false, -1
	sc := bufio.NewScanner(strings.NewReader(text))
	for i := 1; sc.Scan(); i++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "```"):
			if inBlock {
				n.blocks[normalize(strings.Join(block, "\n"))] = true
			}
			inBlock, block = !inBlock, nil
		case inBlock:
			block = append(block, l)
		case strings.HasPrefix(l, "### "):
			for _, name := range strings.Split(strings.TrimPrefix(l, "### "), ", ") {
				n.headings[strings.TrimSpace(name)] = true
			}
		case strings.ReplaceAll(l, " ", "") == "|module|version|license|in|":
			tableAt = i
		case tableAt > 0 && i == tableAt+1:
			if !strings.HasPrefix(l, "|---") {
				return nil, fmt.Errorf("line %d: the table's separator row is missing", i)
			}
		case tableAt > 0 && strings.HasPrefix(l, "|"):
			cells := strings.Split(strings.Trim(l, "|"), "|")
			if len(cells) != 4 {
				return nil, fmt.Errorf("line %d: %d cells, want 4", i, len(cells))
			}
			for j := range cells {
				cells[j] = strings.Trim(strings.TrimSpace(cells[j]), "`")
			}
			if _, dup := n.table[cells[0]]; dup {
				return nil, fmt.Errorf("line %d: %s is listed twice", i, cells[0])
			}
			if cells[1] == "" || cells[2] == "" {
				return nil, fmt.Errorf("line %d: version and license must not be empty", i)
			}
			if !slices.Contains([]string{"Linux", "Windows", "both"}, cells[3]) {
				return nil, fmt.Errorf("line %d: in %q, want Linux, Windows or both", i, cells[3])
			}
			n.table[cells[0]] = row{version: cells[1], license: cells[2], in: cells[3]}
		case tableAt > 0:
			tableAt = -2 // the table ended; a second one is not read
		}
	}
	if inBlock {
		return nil, errors.New("a fenced block is not closed")
	}
	if len(n.table) == 0 {
		return nil, errors.New("no module table")
	}
	return n, sc.Err()
}

// goCmd returns the go command of the toolchain running the test (GOROOT/bin/go when go test
// set GOROOT), else the one on PATH.
func goCmd(args ...string) *exec.Cmd {
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	return exec.Command(gobin, args...)
}

func goEnv(t *testing.T) (version, goroot string) {
	t.Helper()
	out, err := goCmd("env", "GOVERSION", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env: %v (the test needs the go command)", err)
	}
	f := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(f) != 2 {
		t.Fatalf("go env: %q", out)
	}
	return f[0], f[1]
}

// list asks go list what cmd/router links for goos/amd64.
func list(t *testing.T, goos string) linked {
	t.Helper()
	cmd := goCmd("list", "-deps", "-json=ImportPath,Dir,Standard,Module,GoFiles,CgoFiles,SFiles,CFiles", mainPkg)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOOS=%s go list: %v\n%s", goos, err, stderr.Bytes())
	}
	l := linked{modules: map[string]string{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("GOOS=%s go list: %v", goos, err)
		}
		l.pkgs = append(l.pkgs, p)
		if p.Standard || p.Module == nil || p.Module.Main {
			continue
		}
		if p.Module.Replace != nil {
			t.Fatalf("%s is replaced by %s %s: the table has no column for replacements; extend it and this test",
				p.Module.Path, p.Module.Replace.Path, p.Module.Replace.Version)
		}
		l.modules[p.Module.Path] = p.Module.Version
	}
	return l
}
