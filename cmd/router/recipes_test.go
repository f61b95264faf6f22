package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// TestModelRecipes: the model recipes of docs/model.md (testdata/model) lint clean, and
// the user-space NAT's connection for its guest meets the forward's gate, as explain says.
func TestModelRecipes(t *testing.T) {
	for _, tc := range []struct {
		file string
		apps []string // the NAT's processes
		dst  string   // the model server
	}{
		{"qemu-user.toml", []string{"qemu-system-x86_64", "slirp4netns"}, "127.0.0.1:11434"},
		{"pasta.toml", []string{"pasta", "passt.avx2"}, "127.0.0.1:11434"},
		{"virtualbox-nat.toml", []string{"VBoxHeadless", "VirtualBoxVM"}, "127.0.0.1:1234"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("..", "..", "testdata", "model", tc.file)
			checkLintsClean(t, "--config", path)
			for _, app := range tc.apps {
				o := runExplainJSON(t, []string{"--config", path, "--app", app, "--src", "127.0.0.1", "--dst", tc.dst}, policytest.WallEnv())
				if !o.Caged || o.Verdict.Action != "direct" || o.Gate == nil || o.Gate.Forward != "model" || o.Gate.Raw {
					t.Errorf("%s to %s: caged %v, %+v, gate %+v; want the forward's HTTP gate", app, tc.dst, o.Caged, o.Verdict, o.Gate)
				}
			}
		})
	}
}

// TestModelDocExamples: the recipes as docs/model.md prints them lint clean too.
func TestModelDocExamples(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "model.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(data, -1)
	if len(blocks) != 3 {
		t.Fatalf("docs/model.md has %d TOML blocks; want its 3 recipes", len(blocks))
	}
	for i, m := range blocks {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("model-%d.toml", i+1))
		if err := os.WriteFile(path, m[1], 0o600); err != nil {
			t.Fatal(err)
		}
		checkLintsClean(t, "--os", "linux", "--config", path)
	}
}
