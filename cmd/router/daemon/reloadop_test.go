package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/router/control"
)

// TestReloadOverControl: `router reload`'s request. A refused config answers with the
// config's own error (file, line, key), leaves the running config (its hash, its load time)
// and shows in status as the last refused reload; a good one answers with the new hash. A
// SIGHUP's reload is recorded the same way.
func TestReloadOverControl(t *testing.T) {
	s := newScene(t)
	good := s.text("127.0.0.0/8", "")
	s.write(good)
	ready := make(chan struct{})
	reload, reloaded := make(chan struct{}, 1), make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: s.path, Platform: &capturetest.Platform{}, Log: slog.New(slog.DiscardHandler),
			Ready: ready, Reload: reload, Reloaded: reloaded, Grace: time.Second})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitReady(t, ready, done)
	do := func(op string) (control.Response, error) {
		t.Helper()
		c, err := control.Dial(ctx, s.control)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.Do(control.Request{Op: op})
	}
	sum := func(text string) string { b := sha256.Sum256([]byte(text)); return hex.EncodeToString(b[:]) }

	st0, err := do("status")
	if err != nil {
		t.Fatal(err)
	}
	if st0.Status.Running.SHA256 != sum(good) || st0.Status.Running.Loaded.IsZero() {
		t.Fatalf("status at start: running %+v; want the file's hash %s and a load time", st0.Status.Running, sum(good))
	}

	// Refused: a typo in a rule's action.
	s.write(strings.Replace(good, `action = "proxy"`, `action = "prox"`, 1))
	resp, refused := do("reload")
	if refused == nil || !strings.Contains(refused.Error(), s.path) || !strings.Contains(refused.Error(), "action") {
		t.Fatalf("a refused reload answered %+v, %v; want the config's error naming the file and the key", resp, refused)
	}
	st, err := do("status")
	if err != nil {
		t.Fatal(err)
	}
	run := st.Status.Running
	if run.SHA256 != sum(good) || !run.Loaded.Equal(st0.Status.Running.Loaded) || run.Refused != 1 || run.Reloads != 0 ||
		run.LastRefused == nil || run.LastRefused.Error != refused.Error() {
		t.Errorf("status after a refused reload: %+v; want the old hash and time, one refusal with its error", run)
	}

	// Applied, over the control channel, then by a signal.
	changed := s.text("127.0.0.0/8", "# changed\n")
	s.write(changed)
	resp, err = do("reload")
	if err != nil || resp.Config == nil || resp.Config.SHA256 != sum(changed) || resp.Config.Reloads != 1 {
		t.Fatalf("reload: %+v, %v; want the new hash", resp.Config, err)
	}
	s.write(good)
	reload <- struct{}{}
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	st, err = do("status")
	if err != nil {
		t.Fatal(err)
	}
	if run := st.Status.Running; run.SHA256 != sum(good) || run.Reloads != 2 || run.Refused != 1 || run.LastRefused == nil {
		t.Errorf("status after two reloads: %+v; want the good file's hash, 2 applied, the old refusal kept", run)
	}
}

// TestReloadWithoutLoop: a daemon whose loop does not run answers a reload with an error,
// never a hang.
func TestReloadWithoutLoop(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", ""))
	d := s.daemon(&capturetest.Platform{}, nil)
	s.start(d)
	if _, err := d.status.Reload(); err == nil {
		t.Fatal("reload without a loop: no error")
	}
	if _, err := os.Stat(s.path); err != nil {
		t.Fatal(err)
	}
}
