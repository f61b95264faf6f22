package dist

import (
	divert "github.com/lysShub/divert-go"

	"github.com/agentcage/router/windivert"
)

// Files returns copies of the embedded WinDivert.dll and WinDivert64.sys, verified against
// the pinned hashes.
func Files() (windivert.Files, error) {
	f := windivert.Files{
		DLL: append([]byte(nil), divert.DLL.DLL...),
		Sys: append([]byte(nil), divert.DLL.Sys...),
	}
	if err := f.Verify(); err != nil {
		return windivert.Files{}, err
	}
	return f, nil
}
