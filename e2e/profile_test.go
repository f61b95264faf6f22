//go:build linux

package e2e

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
)

// offlineProfile lets a guest reach only the model forward.
const offlineProfile = `
[profile.offline]
[[profile.offline.rule]]
name = "model"
hosts = ["10.0.2.2", "127.0.0.1"]
ports = [47831]
action = "direct"
`

// TestProfileSwitch: `router profile 10.0.2.0/24 offline` ends the first guest's live flow
// to an echo server within a second (counted), refuses its new ones and shows the switch in
// `router status` and the flow log; the second guest's flow goes on and its new ones get
// through. Back on the default profile the first guest reaches the echo again.
func TestProfileSwitch(t *testing.T) {
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, "")+offlineProfile+flowLogKeys)
	guest2 := s.secondGuest()
	echo := s.profileEcho()
	s.startRouter()
	open := func(ns *lab.Netns) (net.Conn, error) {
		c, err := ns.Dial(s.ctx, "tcp", echo)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 2)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
			c.Close()
			return nil, errors.Join(errors.New("no banner"), err)
		}
		return c, nil
	}
	echoes := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return err == nil && string(b) == "ping"
	}
	c1, err := open(s.lab.Guest())
	if err != nil {
		t.Fatalf("the first guest before the switch: %v", err)
	}
	defer c1.Close()
	c2, err := open(guest2)
	if err != nil {
		t.Fatalf("the second guest before the switch: %v", err)
	}
	defer c2.Close()

	start := time.Now()
	out, code := s.routerCmd("profile", "--config", s.cfg, lab.GuestNetwork, "offline")
	if code != 0 || !strings.Contains(out, "vm 10.0.2.0/24: profile offline; 1 live flows it refuses ended") {
		t.Fatalf("router profile: exit %d\n%s", code, out)
	}
	endedWithinASecond(t, c1, start, "the first guest's live flow")
	if !echoes(c2) {
		t.Error("the second guest's live flow was ended by the first guest's switch")
	}
	if c, err := open(s.lab.Guest()); err == nil {
		c.Close()
		t.Error("the first guest's new flow got through on the offline profile")
	}
	if c, err := open(guest2); err != nil {
		t.Errorf("the second guest's new flow: %v", err)
	} else {
		c.Close()
	}
	// The flow log names the profile that refused the guest's new flow.
	s.flowRecords(func(m map[string]any) bool {
		src, _ := m["src"].(string)
		return m["event"] == "refused" && m["profile"] == "offline" && strings.HasPrefix(src, lab.GuestAddr+":")
	})
	s.offlineInStatus("vm 10.0.2.0/24")
	s.waitLog(`profile switch ended live flows`, 5*time.Second)

	if out, code := s.routerCmd("profile", "--config", s.cfg, lab.GuestAddr, "default"); code != 0 {
		t.Fatalf("router profile back: exit %d\n%s", code, out)
	}
	c, err := open(s.lab.Guest())
	if err != nil {
		t.Fatalf("the first guest back on the default profile: %v", err)
	}
	c.Close()
	if st := s.status(); len(st.Profiles) != 0 {
		t.Errorf("status profiles after the switch back = %+v", st.Profiles)
	}
}

// TestProfileSwitchCagedApp: a slirp4netns guest, caged by the qemu preset, is switched by
// its NAT's executable (`router profile app:slirp4netns offline`): its live flow to an echo
// server is ended within a second (counted), its new flows are refused but the model at the
// gateway, status and the flow log name the profile; back on the default profile its
// flows go out again.
func TestProfileSwitchCagedApp(t *testing.T) {
	roottest.Require(t, lab.Slirp4netns)
	const offline = `
[profile.offline]
[[profile.offline.rule]]
name = "model"
hosts = ["127.0.0.1"]
ports = [47831]
action = "direct"
`
	s := newLab(t, userNATConfig()+offline+flowLogKeys)
	u, err := s.lab.AddUserNATGuest(s.ctx, lab.Slirp4netns)
	if err != nil {
		t.Fatal(err)
	}
	echo := s.profileEcho()
	s.startRouter()
	c, err := u.Guest.Dial(s.ctx, "tcp", echo)
	if err != nil {
		t.Fatalf("the guest's flow before the switch: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("no banner before the switch: %q, %v", b, err)
	}

	start := time.Now()
	out, code := s.routerCmd("profile", "--config", s.cfg, "app:"+lab.Slirp4netns, "offline")
	if code != 0 || !strings.Contains(out, "app slirp4netns: profile offline;") {
		t.Fatalf("router profile: exit %d\n%s", code, out)
	}
	endedWithinASecond(t, c, start, "the guest's live flow")
	// Refused: the router answers the plaintext request with its 403, or the flow fails.
	if out, code := s.curl(u.Guest, lab.EchoURL, "--max-time", "3"); code == 0 && !strings.Contains(out, "refused by the router") {
		t.Errorf("the guest's new flow got through on the offline profile: %q", out)
	}
	model := "http://" + net.JoinHostPort(u.Gateway, "47831") + "/v1/models"
	if out, code := s.curl(u.Guest, model); code != 0 || !strings.Contains(out, lab.ModelID) {
		t.Errorf("the model at the gateway on the offline profile: exit %d, %q", code, out)
	}
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "refused" && m["profile"] == "offline" && m["app"] == lab.Slirp4netns
	})
	s.offlineInStatus("app slirp4netns")

	if out, code := s.routerCmd("profile", "--config", s.cfg, "app:"+lab.Slirp4netns, "default"); code != 0 {
		t.Fatalf("router profile back: exit %d\n%s", code, out)
	}
	if out, code := s.curl(u.Guest, lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("back on the default profile: exit %d, %q; want the proxy's exit %s", code, out, lab.ExitAddr)
	}
}

// profileEcho serves, in the lab's internet, the echo target the profile tests' guests
// dial (banner "hi", then echo), and returns its address.
func (s *scene) profileEcho() string {
	s.t.Helper()
	const echo = lab.ServiceAddr + ":9007"
	ln, err := s.lab.Inet().Listen(s.ctx, "tcp", echo)
	if err != nil {
		s.t.Fatal(err)
	}
	echotest.Serve(s.t, ln, "hi", time.Minute)
	return echo
}

// endedWithinASecond checks that the live flow c (what names it) is ended by the router
// within a second of the switch's start.
func endedWithinASecond(t *testing.T, c net.Conn, start time.Time, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	took := time.Since(start)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s after the switch: %v; want it ended", what, err)
	}
	t.Logf("the live flow ended %v after the switch began (the command's start included)", took)
	if took > time.Second {
		t.Errorf("the live flow ended %v after the switch; want within a second", took)
	}
}

// offlineInStatus checks that `router status` shows guest on the offline profile alone and
// counts at least two caged refusals (the live flow ended, the new one refused).
func (s *scene) offlineInStatus(guest string) {
	s.t.Helper()
	st := s.status()
	if len(st.Profiles) != 1 || st.Profiles[0].Guest != guest || st.Profiles[0].Profile != "offline" {
		s.t.Errorf("status profiles = %+v", st.Profiles)
	}
	var caged uint64
	for _, r := range st.Refusals {
		if r.Reason == "caged-no-rule" {
			caged = r.Count
		}
	}
	if caged < 2 {
		s.t.Errorf("caged refusals = %d, want at least 2 (%+v)", caged, st.Refusals)
	}
}
