//go:build linux

package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
)

// routerRun runs `router args...` in the host namespace with the lab's state directory
// (where the running router keeps its approved rules and a learning session's flow log),
// and returns its output and exit code.
func (s *scene) routerRun(args ...string) (string, int) {
	s.t.Helper()
	cmd, err := s.lab.RouterCommand(s.ctx, routerBin, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return string(out) + err.Error(), -1
	}
	return string(out), 0
}

// stateFile is name in the lab's state directory.
func (s *scene) stateFile(name string) string {
	s.t.Helper()
	dir, err := s.lab.StateDir()
	if err != nil {
		s.t.Fatal(err)
	}
	return filepath.Join(dir, name)
}
