package windivert

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentcage/router/internal/winetest"
)

// fakeFiles returns stand-in contents and pins for them: the real files only exist in the
// windows/amd64 build (see the dist package and the Wine tests).
func fakeFiles() (Files, [2]pin) {
	f := Files{DLL: bytes.Repeat([]byte("MZ dll "), 1000), Sys: bytes.Repeat([]byte("MZ sys "), 1500)}
	h := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	return f, [2]pin{{DLLName, h(f.DLL)}, {SysName, h(f.Sys)}}
}

func TestInstall(t *testing.T) {
	t.Run("writes both files", func(t *testing.T) {
		dir := winetest.TempDir(t)
		f, pins := fakeFiles()
		if err := install(dir, f, pins); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			want []byte
		}{{DLLName, f.DLL}, {SysName, f.Sys}} {
			got, err := os.ReadFile(filepath.Join(dir, c.name))
			if err != nil || !bytes.Equal(got, c.want) {
				t.Errorf("%s: %d bytes, err %v; want %d bytes", c.name, len(got), err, len(c.want))
			}
		}
		if err := verifyDir(dir, pins); err != nil {
			t.Errorf("verifyDir after install: %v", err)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 2 {
			t.Errorf("directory has %d entries, want 2 (no temporary files left)", len(ents))
		}
	})
	for _, which := range []string{"dll", "sys"} {
		t.Run("tampered "+which+" byte refused, nothing written", func(t *testing.T) {
			dir := winetest.TempDir(t)
			f, pins := fakeFiles()
			if which == "dll" {
				f.DLL = append([]byte(nil), f.DLL...)
				f.DLL[100] ^= 1
			} else {
				f.Sys = append([]byte(nil), f.Sys...)
				f.Sys[len(f.Sys)-1] ^= 0x80
			}
			err := install(dir, f, pins)
			if !errors.Is(err, ErrHashMismatch) {
				t.Fatalf("install = %v, want ErrHashMismatch", err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%d files written despite the refusal", len(ents))
			}
		})
	}
	t.Run("existing tampered file replaced", func(t *testing.T) {
		dir := winetest.TempDir(t)
		f, pins := fakeFiles()
		bad := append([]byte(nil), f.Sys...)
		bad[0] ^= 1
		if err := os.WriteFile(filepath.Join(dir, SysName), bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := verifyFile(filepath.Join(dir, SysName), pins[1].sha256); !errors.Is(err, ErrHashMismatch) {
			t.Errorf("verifyFile before install = %v, want ErrHashMismatch", err)
		}
		if err := install(dir, f, pins); err != nil {
			t.Fatal(err)
		}
		if err := verifyDir(dir, pins); err != nil {
			t.Errorf("verifyDir after install: %v", err)
		}
	})
	t.Run("good existing file left alone", func(t *testing.T) {
		dir := winetest.TempDir(t)
		f, pins := fakeFiles()
		if err := install(dir, f, pins); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, DLLName)
		before, _ := os.Stat(p)
		if err := install(dir, f, pins); err != nil {
			t.Fatal(err)
		}
		after, _ := os.Stat(p)
		if !os.SameFile(before, after) {
			t.Errorf("a file with the right hash was rewritten")
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		f, pins := fakeFiles()
		if err := install(filepath.Join(winetest.TempDir(t), "nope"), f, pins); err == nil {
			t.Errorf("install into a missing directory succeeded")
		}
	})
	t.Run("official pins refuse other bytes", func(t *testing.T) {
		f, _ := fakeFiles()
		if err := Install(winetest.TempDir(t), f); !errors.Is(err, ErrHashMismatch) {
			t.Errorf("Install(fake files) = %v, want ErrHashMismatch", err)
		}
	})
	t.Run("verify missing and oversized files", func(t *testing.T) {
		dir := winetest.TempDir(t)
		_, pins := fakeFiles()
		if err := verifyDir(dir, pins); err == nil {
			t.Errorf("verifyDir of an empty directory succeeded")
		}
		big := make([]byte, 5<<20)
		os.WriteFile(filepath.Join(dir, DLLName), big, 0o644)
		if err := verifyFile(filepath.Join(dir, DLLName), pins[0].sha256); !errors.Is(err, ErrHashMismatch) {
			t.Errorf("oversized file: %v, want ErrHashMismatch", err)
		}
	})
}
