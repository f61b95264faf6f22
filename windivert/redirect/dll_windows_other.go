//go:build windows && !amd64

package redirect

import (
	"errors"

	"github.com/agentcage/router/windivert"
)

// LoadWinDivert is windows/amd64 only: the pinned WinDivert files are the x64 build.
func LoadWinDivert(dir string) (windivert.Driver, func() error, error) {
	return nil, nil, errors.New("redirect: WinDivert is supported on windows/amd64 only")
}
