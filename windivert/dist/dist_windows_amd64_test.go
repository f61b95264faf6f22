package dist_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentcage/router/internal/winetest"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/dist"
)

func TestEmbeddedFilesInstall(t *testing.T) {
	f, err := dist.Files()
	if err != nil {
		t.Fatal(err)
	}
	dir := winetest.TempDir(t)
	if err := dist.Install(dir); err != nil {
		t.Fatal(err)
	}
	if err := windivert.VerifyDir(dir); err != nil {
		t.Fatal(err)
	}
	t.Run("tampered byte refused", func(t *testing.T) {
		bad := windivert.Files{DLL: append([]byte(nil), f.DLL...), Sys: f.Sys}
		bad.DLL[len(bad.DLL)/2] ^= 0x01
		d2 := winetest.TempDir(t)
		if err := windivert.Install(d2, bad); !errors.Is(err, windivert.ErrHashMismatch) {
			t.Fatalf("Install(tampered) = %v, want ErrHashMismatch", err)
		}
		if _, err := os.Stat(filepath.Join(d2, windivert.DLLName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("tampered install left %s behind (%v)", windivert.DLLName, err)
		}
	})
}
