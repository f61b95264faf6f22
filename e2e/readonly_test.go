//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// startReadOnly starts `router run --config s.cfg args...` with the config's directory
// read-only, as the shipped unit's ProtectSystem=strict makes /etc/router (the control
// socket's directory stays writable, as RuntimeDirectory= makes /run/router): in a mount
// namespace of its own, through a wrapper that bind-mounts the directory read-only and execs
// the router (same process, so the scene stops it by its PID).
func (s *scene) startReadOnly(args ...string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Dir(s.controlPath()), 0o700); err != nil {
		s.t.Fatal(err)
	}
	wrapper := filepath.Join(s.t.TempDir(), "router-ro")
	script := fmt.Sprintf(`#!/bin/sh
exec unshare --mount --propagation private -- sh -c 'mount --bind "$0" "$0" && mount --bind "$0/control" "$0/control" && mount -o remount,bind,ro "$0" && exec %q "$@"' %q "$@"
`, routerBin, s.dir)
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		s.t.Fatal(err)
	}
	r, err := s.lab.StartRouterWith(wrapper, s.cfg, 15*time.Second, args...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.router = r
}

// TestApprovalUnderReadOnlyConfig: with the config's directory read-only (the unit's
// sandbox), an "always" answer is written to the state directory and carries the flow.
func TestApprovalUnderReadOnlyConfig(t *testing.T) {
	s := newLab(t, askConfig("30s"))
	s.startReadOnly()
	echo := "http://" + lab.EchoName + "/"
	res := make(chan int, 1)
	go func() { _, code := s.curl(s.lab.Guest(), echo, "--max-time", "10"); res <- code }()
	p := s.waitAsk(80)
	if out, code := s.routerCmd("ask", "--socket", s.controlPath(), "--id", fmt.Sprint(p.ID), "--answer", "always"); code != 0 {
		t.Fatalf("router ask always: exit %d: %s", code, out)
	}
	if code := <-res; code != 0 {
		t.Errorf("the approved flow: curl exit %d", code)
	}
	if b, err := os.ReadFile(s.stateFile("approved.toml")); err != nil || !strings.Contains(string(b), lab.EchoName) {
		t.Errorf("approved.toml in the state directory: %v\n%s", err, b)
	}
	if strings.Contains(s.log(), "read-only file system") {
		t.Errorf("the router hit the read-only config directory:\n%s", s.log())
	}
}

// TestLearningUnderReadOnlyConfig: with the config's directory read-only, a learning
// session starts and records the guest's flows in the state directory's flow log.
func TestLearningUnderReadOnlyConfig(t *testing.T) {
	s := newLab(t, strings.Replace(config(lab.GoSocksAddr, ""), vmRule, "", 1))
	s.startReadOnly("--learn")
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/"); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("the session: exit %d, %q", code, out)
	}
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "flow" && m["caged"] == true && m["name"] == lab.EchoName
	})
	if _, err := os.Stat(s.stateFile("flows.jsonl")); err != nil {
		t.Errorf("no flow log in the state directory: %v", err)
	}
}
