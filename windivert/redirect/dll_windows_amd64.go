package redirect

import "github.com/agentcage/router/windivert"

// LoadWinDivert verifies and loads WinDivert.dll (and checks WinDivert64.sys) in dir, an
// absolute path. release unloads it once every handle opened through it is closed.
func LoadWinDivert(dir string) (d windivert.Driver, release func() error, err error) {
	dll, err := windivert.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	return dll, dll.Release, nil
}
