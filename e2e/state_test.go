//go:build linux

package e2e

import "path/filepath"

// stateFile is name in the lab's state directory.
func (s *scene) stateFile(name string) string {
	s.t.Helper()
	dir, err := s.lab.StateDir()
	if err != nil {
		s.t.Fatal(err)
	}
	return filepath.Join(dir, name)
}
