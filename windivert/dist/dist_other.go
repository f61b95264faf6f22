//go:build !(windows && amd64)

package dist

import (
	"fmt"
	"runtime"

	"github.com/agentcage/router/windivert"
)

// Files reports that the WinDivert files are only carried for windows/amd64 (WinDivert
// 2.2.2 has no arm64 build, and the router does not support 32-bit Windows).
func Files() (windivert.Files, error) {
	return windivert.Files{}, fmt.Errorf("windivert: no WinDivert files for %s/%s (only windows/amd64)", runtime.GOOS, runtime.GOARCH)
}
