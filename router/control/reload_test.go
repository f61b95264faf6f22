package control

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// reloadHandler is a Handler that reloads: it refuses while refuse is set.
type reloadHandler struct {
	fakeHandler
	refuse error
	calls  int
}

func (h *reloadHandler) Reload() (ConfigStat, error) {
	h.calls++
	if h.refuse != nil {
		return ConfigStat{SHA256: "old", LastRefused: &RefusedReload{At: time.Unix(2, 0), Error: h.refuse.Error()}}, h.refuse
	}
	return ConfigStat{SHA256: "new", Loaded: time.Unix(3, 0)}, nil
}

func client(t *testing.T, h Handler) *Client {
	t.Helper()
	srv, cli := net.Pipe()
	go serveConn(srv, h, nil)
	c := &Client{c: cli, sc: newScanner(cli)}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestReloadOp: "reload" asks the daemon to read its config again and answers the refusal
// as an error (the file's own message), or the config now running; a handler that cannot
// reload says so.
func TestReloadOp(t *testing.T) {
	h := &reloadHandler{refuse: errors.New("router.toml:3: rule[1].action: unknown action \"prox\"")}
	c := client(t, h)
	r, err := c.Do(Request{Op: "reload"})
	if err == nil || !strings.Contains(err.Error(), `router.toml:3: rule[1].action`) {
		t.Fatalf("refused reload: %+v, %v; want the config's error", r, err)
	}
	if r.Config == nil || r.Config.SHA256 != "old" || r.Config.LastRefused == nil {
		t.Errorf("refused reload's config %+v; want the running one and the refusal", r.Config)
	}
	h.refuse = nil
	r, err = c.Do(Request{Op: "reload"})
	if err != nil || r.Config == nil || r.Config.SHA256 != "new" {
		t.Fatalf("reload: %+v, %v; want the new config", r, err)
	}
	if h.calls != 2 {
		t.Errorf("%d reloads; want 2", h.calls)
	}
	if _, err := client(t, fakeHandler{}).Do(Request{Op: "reload"}); err == nil || !strings.Contains(err.Error(), "reload") {
		t.Errorf("a handler without reload: %v; want an error", err)
	}
}
