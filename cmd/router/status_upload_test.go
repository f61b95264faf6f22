package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/router/control"
)

// uploadStatus is a daemon with an upload budget: one guest past it for one domain.
func uploadStatus() *control.Status {
	st := sampleStatus()
	st.Uploads = []control.UploadStat{
		{Guest: "vm 10.0.2.0/24", Domain: "example.com", Used: 60 << 20, Limit: 50 << 20, Ends: watchNow.Add(40 * time.Second), Over: true},
		{Guest: "vm 10.0.2.0/24", Domain: "github.com", Used: 3 << 20, Limit: 50 << 20, Ends: watchNow.Add(40 * time.Second)},
	}
	return st
}

// TestStatusUploads: status and watch show each guest's bytes up to each domain against
// the upload budget, and the time left in its window.
func TestStatusUploads(t *testing.T) {
	var b bytes.Buffer
	writeStatus(&b, uploadStatus(), watchNow)
	m := newTestWatch(t, &fakeDaemon{st: uploadStatus()}, 160, 60)
	for name, out := range map[string]string{"status": b.String(), "watch": m.View()} {
		var lines []string // each line's words, one space apart
		for _, l := range strings.Split(out, "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		flat := strings.Join(lines, "\n")
		for _, want := range []string{
			"UPLOAD BUDGET DOMAIN SENT WINDOW ENDS",
			"vm 10.0.2.0/24 example.com 60.0 MiB of 50.0 MiB OVER in 40s",
			"vm 10.0.2.0/24 github.com 3.0 MiB of 50.0 MiB in 40s",
		} {
			if !strings.Contains(flat, want) {
				t.Errorf("%s: missing %q in:\n%s", name, want, out)
			}
		}
	}
}
