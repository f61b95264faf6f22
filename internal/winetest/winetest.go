// Package winetest holds what tests need to run as Windows binaries under Wine 8 too (see
// tools/wine-go): it is imported by tests only.
package winetest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TempDir is t.TempDir for tests that also run under Wine 8, whose NT layer lacks what Go
// 1.26's os.RemoveAll uses on Windows ("unlinkat ...: Invalid function"): it removes the
// directory entry by entry with os.Remove, children before parents.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "router-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var paths []string
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				paths = append(paths, p)
			}
			return nil
		})
		slices.Reverse(paths)
		for _, p := range paths {
			if err := os.Remove(p); err != nil {
				t.Errorf("clean up temporary directory: %v", err)
			}
		}
	})
	return dir
}
