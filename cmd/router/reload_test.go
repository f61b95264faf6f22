//go:build unix

package main

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/router/control"
)

// reloadingDaemon answers the control channel as a daemon whose reloads refuse while
// refuse is set.
type reloadingDaemon struct {
	mu      sync.Mutex
	refuse  error
	running control.ConfigStat
}

func (d *reloadingDaemon) Status() control.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return control.Status{Started: time.Now(), Config: "/etc/router/router.toml", Running: d.running}
}

func (d *reloadingDaemon) NameFor(netip.Addr) (string, bool, bool) { return "", false, false }

func (d *reloadingDaemon) Reload() (control.ConfigStat, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refuse != nil {
		d.running.Refused++
		d.running.LastRefused = &control.RefusedReload{At: time.Now(), Error: d.refuse.Error()}
		return d.running, d.refuse
	}
	d.running.Reloads++
	d.running.SHA256, d.running.Loaded = "feedfacefeedface", time.Now()
	return d.running, nil
}

// TestReloadCommand: `router reload` exits 1 with the daemon's reason when the new config
// is refused, and `router status` then shows the refusal; it exits 0 once the config loads.
func TestReloadCommand(t *testing.T) {
	d := &reloadingDaemon{running: control.ConfigStat{SHA256: "0123456789abcdef", Loaded: time.Now()},
		refuse: errors.New(`/etc/router/router.toml:12: rule[2].action: unknown action "prox" (did you mean "proxy"?)`)}
	path := serveControl(t, d)

	out, errOut, code := run(t, "reload", "--socket", path)
	if code != exitFindings || !strings.Contains(errOut, `router.toml:12: rule[2].action: unknown action "prox"`) || !strings.Contains(errOut, "0123456789ab") {
		t.Errorf("refused reload: exit %d, stdout %q, stderr %q; want 1 and the reason", code, out, errOut)
	}
	out, _, code = run(t, "status", "--socket", path)
	if code != exitOK || !strings.Contains(out, "last reload REFUSED") || !strings.Contains(out, `unknown action "prox"`) || !strings.Contains(out, "sha256 0123456789ab") {
		t.Errorf("status after a refused reload: exit %d\n%s", code, out)
	}
	d.mu.Lock()
	d.refuse = nil
	d.mu.Unlock()
	out, errOut, code = run(t, "reload", "--socket", path)
	if code != exitOK || !strings.Contains(out, "reloaded (sha256 feedfacefeed") {
		t.Errorf("reload: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := run(t, "reload", "--socket", filepath.Join(t.TempDir(), "none.sock")); code != exitFindings || !strings.Contains(errOut, "is the router running?") {
		t.Errorf("no daemon: exit %d, %q", code, errOut)
	}
}
