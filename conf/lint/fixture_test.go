package lint

import (
	"embed"
	"path"
	"slices"
	"strings"
	"testing"
)

// testdata holds configs the tests lint, one a file.
//
//go:embed testdata
var testdata embed.FS

// Configs one test lints on its own.
var (
	//go:embed testdata/ungated-loopback.toml
	ungatedLoopback string
	//go:embed testdata/profiles.toml
	profilesConfig string
)

// checkFixtures lints each config under testdata/DIR, with prefix before its text, and
// compares the findings keep selects (as short renders them) with the file's "# want: "
// lines, in order. A file is judged for the OS its "# os: " line names, else for the OS
// the test runs on.
func checkFixtures(t *testing.T, dir, prefix string, keep func(short string) bool) {
	t.Helper()
	files, err := testdata.ReadDir("testdata/" + dir)
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs in testdata/%s: %v", dir, err)
	}
	for _, file := range files {
		t.Run(file.Name(), func(t *testing.T) {
			b, err := testdata.ReadFile(path.Join("testdata", dir, file.Name()))
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			var want []string
			goos := ""
			for _, line := range strings.Split(text, "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					want = append(want, w)
				}
				if o, ok := strings.CutPrefix(line, "# os: "); ok {
					goos = strings.TrimSpace(o)
				}
			}
			var got []string
			for _, s := range short(Check(parseOS(t, goos, prefix+text), Host{OS: goos})) {
				if s = strings.TrimSpace(s); keep(s) {
					got = append(got, s)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("got  %q\nwant %q", got, want)
			}
		})
	}
}
