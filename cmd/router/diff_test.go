package main

import (
	"strings"
	"testing"
)

// TestDiffCommand: `router diff` on a recorded session. A config that widens the cage exits
// 1 and names the flows it opens; one that only narrows it exits 0 and lists what it would
// refuse.
func TestDiffCommand(t *testing.T) {
	const dir = "../../testdata/diff/"
	flows := dir + "flows.jsonl"
	out, errOut, code := run(t, "diff", "--flows", flows, "--old", dir+"allowlist.toml", "--new", dir+"wider.toml")
	if code != exitFindings || !strings.Contains(out, "OPENED") || !strings.Contains(out, "paste.example:443 (1)") ||
		!strings.Contains(out, "203.0.113.66:22 (1)") || !strings.Contains(out, `proxy via exit by #2 "vm" (was block by #2 "vm")`) {
		t.Errorf("wider: exit %d, stderr %q, output:\n%s", code, errOut, out)
	}
	out, errOut, code = run(t, "diff", "--flows", flows, "--old", dir+"allowlist.toml", "--new", dir+"narrower.toml")
	if code != exitOK || strings.Contains(out, "OPENED") || !strings.Contains(out, "refused by the new config") ||
		!strings.Contains(out, "files.pypi.org:443 (1)") || !strings.Contains(out, "unchanged: 3 flows") {
		t.Errorf("narrower: exit %d, stderr %q, output:\n%s", code, errOut, out)
	}
	if _, errOut, code := run(t, "diff", "--old", dir+"allowlist.toml"); code != exitUsage || !strings.Contains(errOut, "--new is required") {
		t.Errorf("without --new: exit %d, %q", code, errOut)
	}
}
