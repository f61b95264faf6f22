// Package dist supplies the official, signed WinDivert 2.2.2 files (WinDivert-2.2.2-A,
// x64) for `router service install`.
//
// The bytes come from a registry, never from a download site: the Go module
// github.com/lysShub/divert-go (MIT licence) embeds them, and the module is pinned in go.mod
// at v0.0.0-20250418062248-28e4462def61. Its package is imported only for the bytes (in a
// windows/amd64 file); none of its code is called. windivert.Install verifies both files
// against the pinned SHA-256 values before writing them, so a different module version
// carrying other bytes is refused.
//
// WinDivert itself is licensed under the LGPL v3 or the GPL v2: the files are shipped
// unmodified and installed as separate, replaceable files beside router.exe.
package dist

import "github.com/agentcage/router/windivert"

// ModulePath and ModuleVersion name the Go module that carries the files.
const (
	ModulePath    = "github.com/lysShub/divert-go"
	ModuleVersion = "v0.0.0-20250418062248-28e4462def61"
	// ModuleDLLPath and ModuleSysPath are the files inside the module zip.
	ModuleDLLPath = "embed/WinDivert64.dll"
	ModuleSysPath = "embed/WinDivert64.sys"
)

// Install writes the official files into dir after verifying them (windivert.Install).
func Install(dir string) error {
	f, err := Files()
	if err != nil {
		return err
	}
	return windivert.Install(dir, f)
}
