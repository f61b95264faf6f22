package conf

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// Bounds for a refused config, generous enough for a loaded 2-core machine under -race.
const (
	refuseTime  = time.Second
	refuseAlloc = 64 << 20
)

// TestRefusedQuickly: a 10 MB file and files nested deeper than the schema are refused
// before the TOML library sees them, quickly, in flat memory, with an error that names the
// file (and the line and key where a shape limit is crossed).
func TestRefusedQuickly(t *testing.T) {
	big := genShape("rules", 10<<20)
	big = append(big, "#"+strings.Repeat("-", 10<<20-len(big)-2)+"\n"...) // exactly 10 MB
	// A file of our own rather than t.TempDir: Wine cannot remove a directory tree the way
	// the testing package does, and the Windows test binary runs there.
	f, err := os.CreateTemp("", "big-*.toml")
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil {
			t.Errorf("remove the 10 MB file: %v", err)
		}
	})
	_, err = f.Write(big)
	if cerr := f.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	tests := []struct {
		name string
		load func() error
		want string // the whole error, or its start when it ends in "…"
	}{
		{"10 MB, Load", func() error { _, err := Load(path, Options{LookupEnv: noEnv}); return err },
			path + ": the file is larger than that: a config may be at most 2097152 bytes (2 MiB)…"},
		{"10 MB, Parse", func() error { _, err := Parse("big.toml", big, Options{LookupEnv: noEnv}); return err },
			"big.toml: the file is 10485760 bytes: a config may be at most 2097152 bytes (2 MiB)…"},
	}
	for _, shape := range []struct{ kind, want string }{
		{"nested-arrays", "f.toml:1: x: an array that holds an array or an inline table: the config has none…"},
		{"nested-inline", "f.toml:1: x.a.a.a.a.a.a.a: nested deeper than 8 levels…"},
		{"dotted-key", "f.toml:1: a.a.a.a.a.a.a.a: nested deeper than 8 levels…"},
		{"dotted-header", "f.toml:1: a.a.a.a.a.a.a.a: nested deeper than 8 levels…"},
		{"inline-array", "f.toml:1: x: an array that holds an array or an inline table…"},
		{"long-header-keys", "f.toml:1: " + strings.Repeat("h", 64) + "…: a key path longer than 128 bytes…"},
		{"long-key", "f.toml:1: " + strings.Repeat("k", 64) + "…: a key path longer than 128 bytes…"},
	} {
		data := genShape(shape.kind, MaxFileSize-64)
		tests = append(tests, struct {
			name string
			load func() error
			want string
		}{shape.kind + ", 2 MB", func() error { _, err := Parse("f.toml", data, Options{LookupEnv: noEnv}); return err }, shape.want})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			c := measure(func() { err = tt.load() })
			t.Logf("refused in %v", c)
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("err = %v, want one conf.Error", err)
			}
			got := err.Error()
			if want, prefix := strings.CutSuffix(tt.want, "…"); prefix && !strings.HasPrefix(got, want) || !prefix && got != want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if c.took > refuseTime || c.alloc > refuseAlloc {
				t.Errorf("refusing took %v; want under %v and %d MB", c, refuseTime, refuseAlloc>>20)
			}
		})
	}
}

// TestTenThousandRules: a long honest config still loads, in time and memory linear in it.
func TestTenThousandRules(t *testing.T) {
	src := []byte(genRules(10000))
	var cfg *Config
	var err error
	c := measure(func() { cfg, err = Parse("rules.toml", src, Options{LookupEnv: noEnv, OS: "linux"}) }) // vm_networks: a Linux config
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 rules (%d KB) loaded in %v", len(src)>>10, c)
	if len(cfg.Rules) != 10001 || cfg.RuleLines[10000] == 0 || cfg.Rules[9999].Name != "r9999" {
		t.Fatalf("got %d rules, last lines %v", len(cfg.Rules), cfg.RuleLines[9998:])
	}
	if c.alloc > 100*uint64(len(src)) {
		t.Errorf("loading took %v; want under %d MB", c, 100*len(src)>>20)
	}
	// Linear in time: against a tenth of the rules, measured the same way, ten times as long
	// (quadratic would be a hundred). A ratio, not a wall-clock bound, so that a loaded
	// machine does not fail it; the best of three means, each over as many loads as fill
	// 100 ms, so that a clock that advances in coarse ticks (Wine's, every 15.6 ms) does not
	// read a short load as nothing.
	best := func(n int) time.Duration {
		src := []byte(genRules(n))
		d := time.Duration(1 << 62)
		for range 3 {
			runs, start := 0, time.Now()
			for runs == 0 || time.Since(start) < 100*time.Millisecond {
				_, _ = Parse("rules.toml", src, Options{LookupEnv: noEnv, OS: "linux"})
				runs++
			}
			d = min(d, time.Since(start)/time.Duration(runs))
		}
		return d
	}
	small, large := best(1000), best(10000)
	t.Logf("1,000 rules: %v; 10,000 rules: %v (%.1f×)", small, large, float64(large)/float64(small))
	if large > 40*small {
		t.Errorf("10,000 rules took %v, %.0f× the %v of 1,000: not linear", large, float64(large)/float64(small), small)
	}
}

// TestLoadIsLinear: every shape that once made loading quadratic, and the large honest ones,
// cost about 8 times as much for 8 times the text (a quadratic cost would be 64 times).
func TestLoadIsLinear(t *testing.T) {
	const small, large = 32 << 10, 256 << 10
	for _, kind := range shapes {
		t.Run(kind, func(t *testing.T) {
			var cs [2]cost
			for i, size := range []int{small, large} {
				data := genShape(kind, size)
				cs[i] = measure(func() { _, _ = Parse("f.toml", data, Options{LookupEnv: noEnv}) })
			}
			t.Logf("%d KB: %v; %d KB: %v", small>>10, cs[0], large>>10, cs[1])
			if cs[1].alloc > 16*cs[0].alloc+(1<<20) {
				t.Errorf("allocation grows faster than the text: %v then %v", cs[0], cs[1])
			}
			if cs[1].alloc > 400*large+(1<<20) {
				t.Errorf("%v for %d KB: more than 400 bytes for each byte of text", cs[1], large>>10)
			}
		})
	}
}

// TestTooManyErrors: a file with thousands of mistakes reports the first MaxErrors by line
// and counts the rest.
func TestTooManyErrors(t *testing.T) {
	data := genShape("many-keys", 64<<10)
	_, err := Parse("f.toml", data, Options{LookupEnv: noEnv})
	var es Errors
	if !errors.As(err, &es) || len(es) != MaxErrors+1 {
		t.Fatalf("got %d errors, want %d and a count", len(es), MaxErrors)
	}
	for i, e := range es[:MaxErrors] {
		if e.Line != i+2 || !strings.Contains(e.Msg, "unknown key") {
			t.Errorf("error %d: %v", i, e)
		}
	}
	n := strings.Count(string(data), "\n") - 1
	if got, want := es[MaxErrors].Error(), "f.toml: "+strconv.Itoa(n-MaxErrors)+" more errors not shown (only the first 50 are)"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// treeShape measures a decoded TOML tree as the locator does: the deepest path in segments,
// the longest key path in bytes, and whether an array holds an array or a table.
func treeShape(v any, depth, keyLen int) (maxDepth, maxKey int, nested bool) {
	maxDepth, maxKey = depth, keyLen
	merge := func(d, k int, n bool) {
		maxDepth, maxKey, nested = max(maxDepth, d), max(maxKey, k), nested || n
	}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			kl := keyLen + len(k)
			if keyLen > 0 {
				kl++
			}
			merge(treeShape(x, depth+1, kl))
		}
	case []map[string]any:
		for _, x := range v {
			merge(treeShape(x, depth+1, keyLen))
		}
	case []any:
		for _, x := range v {
			switch x.(type) {
			case map[string]any, []any, []map[string]any:
				nested = true
			}
			merge(treeShape(x, depth+1, keyLen))
		}
	}
	return maxDepth, maxKey, nested
}

// FuzzParse: no input makes Parse panic or hang; every error names the file; each input
// costs time and memory within a budget linear in its size; and the locator's shape check
// agrees with what the TOML library decodes: whatever it lets through is within the
// limits, and it refuses nothing well within them.
// Seeds beside the ones added here: testdata/fuzz/FuzzParse (TOML the locator must read as the library does).
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../testdata/conf/virtualbox.toml", "../testdata/conf/trap.toml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	bad, _ := filepath.Glob("../testdata/conf/bad/*.toml")
	for _, p := range bad {
		data, _ := os.ReadFile(p)
		f.Add(data)
	}
	for _, kind := range shapes {
		f.Add(genShape(kind, 512))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var err error
		c := measure(func() {
			_, err = Parse("f.toml", data, Options{LookupEnv: noEnv, ReadFile: func(string) ([]byte, error) { return nil, os.ErrNotExist }})
		})
		if err != nil && !strings.HasPrefix(err.Error(), "f.toml") {
			t.Fatalf("error does not name the file: %v", err)
		}
		if budget := 4<<20 + 400*uint64(len(data)); c.alloc > budget {
			t.Fatalf("%d bytes cost %v, over the budget of %d MB", len(data), c, budget>>20)
		}
		if budget := 2*time.Second + time.Duration(len(data))*2*time.Microsecond; c.took > budget {
			t.Fatalf("%d bytes took %v, over the budget of %v", len(data), c, budget)
		}
		if len(data) > MaxFileSize {
			return
		}
		l := locate(string(data))
		var raw map[string]any
		if _, err := toml.Decode(string(data), &raw); err != nil {
			return
		}
		depth, keyLen, nested := treeShape(raw, 0, 0)
		switch {
		case l.over == nil && (depth > MaxNesting || keyLen > MaxKeyPath || nested):
			t.Fatalf("the locator let through a tree %d deep with keys of %d bytes (nested arrays: %v)", depth, keyLen, nested)
		case l.over != nil && depth <= MaxNesting && 10*keyLen <= MaxKeyPath && !nested:
			t.Fatalf("the locator refused a tree %d deep with keys of %d bytes: %v", depth, keyLen, l.over)
		}
	})
}

// TestShapeErrors: each shape limit names the file, the line where it is crossed and the
// key, whatever comes before it.
func TestShapeErrors(t *testing.T) {
	const rule = "[proxy.exit]\naddress = \"198.51.100.1:1080\"\n\n[[rule]]\nname = \"r\"\n"
	tests := []struct{ src, want string }{
		{rule + "action = \"direct\"\n[a.b.c.d.e.f.g.h.i]\n",
			"f.toml:7: a.b.c.d.e.f.g.h: nested deeper than 8 levels (each table name, dotted key part, array and inline table is a level; the config needs 4 at most)"},
		{rule + "x = { a = { b = { c = { d = {\n e = { f = 1 } } } } } }\n",
			"f.toml:7: rule[1].x.a.b.c.d.e: nested deeper than 8 levels (each table name, dotted key part, array and inline table is a level; the config needs 4 at most)"},
		{rule + "hosts = [\n  \"a.test\",\n  [\"b.test\"],\n]\n",
			"f.toml:8: rule[1].hosts: an array that holds an array or an inline table: the config has none (its arrays hold strings and numbers; tables are written [name] or [[name]])"},
		{rule + "[proxy." + strings.Repeat("p", 130) + "]\n",
			"f.toml:6: proxy." + strings.Repeat("p", 58) + "…: a key path longer than 128 bytes (table and key names with their dots); the config's own are under 40"},
	}
	for _, tt := range tests {
		_, err := Parse("f.toml", []byte(tt.src), Options{LookupEnv: noEnv})
		if err == nil || err.Error() != tt.want {
			t.Errorf("got  %v\nwant %s\nin:\n%s", err, tt.want, tt.src)
		}
	}
}
