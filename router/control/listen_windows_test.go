//go:build windows

package control

import "testing"

// TestPipeListen creates the pipe with its security descriptor. What Wine 8 cannot show is
// left to docs/windows-checklist.md: a round trip (its named pipes do not carry go-winio's
// overlapped I/O), the refusal of a second listener on the name, and the ACL itself.
func TestPipeListen(t *testing.T) {
	const path = `\\.\pipe\router-control-test`
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
}
