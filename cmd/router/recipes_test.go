package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/agentcage/router/rules/policy/policytest"
)

// modelRecipe is one model recipe of docs/model.md as testdata/model holds it: its file,
// the processes of the guest's user-space NAT, and the model server they connect to.
type modelRecipe struct {
	file string
	apps []string
	dst  string
}

// modelRecipes are the recipes, in the order docs/model.md prints them.
func modelRecipes() []modelRecipe {
	return []modelRecipe{
		{"qemu-user.toml", []string{"qemu-system-x86_64", "slirp4netns"}, "127.0.0.1:11434"},
		{"pasta.toml", []string{"pasta", "passt.avx2"}, "127.0.0.1:11434"},
		{"virtualbox-nat.toml", []string{"VBoxHeadless", "VirtualBoxVM"}, "127.0.0.1:1234"},
	}
}

// TestModelRecipes: the model recipes of docs/model.md (testdata/model) lint clean, and
// the user-space NAT's connection for its guest meets the forward's gate, as explain says.
func TestModelRecipes(t *testing.T) {
	for _, tc := range modelRecipes() {
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
	if want := len(modelRecipes()); len(blocks) != want {
		t.Fatalf("docs/model.md has %d TOML blocks; want its %d recipes", len(blocks), want)
	}
	for i, m := range blocks {
		checkLintsClean(t, "--os", "linux", "--config", writeTemp(t, fmt.Sprintf("model-%d.toml", i+1), string(m[1])))
	}
}
