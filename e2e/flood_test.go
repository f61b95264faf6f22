//go:build linux

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules/refusal"
)

// timedCurl fetches url from ns and returns the body, curl's exit code and its total time.
func (s *scene) timedCurl(ns *lab.Netns, url string) (string, int, time.Duration) {
	s.t.Helper()
	out, code := s.curl(ns, url, "-w", "\n%{time_total}")
	body, secs, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		body, secs = strings.TrimSpace(out[:i]), strings.TrimSpace(out[i+1:])
	}
	f, err := strconv.ParseFloat(secs, 64)
	if err != nil {
		return out, code, -1
	}
	return body, code, time.Duration(f * float64(time.Second))
}

// hold opens n connections from ns to the addresses addr(i) and keeps them open until the
// test ends; it returns how many connected.
func (s *scene) hold(ns *lab.Netns, n int, addr func(i int) string) int {
	s.t.Helper()
	ok := 0
	for i := range n {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		c, err := ns.Dial(ctx, "tcp", addr(i))
		cancel()
		if err != nil {
			if i-ok < 3 {
				s.t.Logf("connection %d: %v", i, err)
			}
			continue
		}
		ok++
		s.t.Cleanup(func() { c.Close() })
	}
	return ok
}

// wantQuick checks a flow of another source and the model forward while a flood runs: both
// answer, within limit.
func (s *scene) wantQuick(what string, guest2 *lab.Netns, limit time.Duration) {
	s.t.Helper()
	body, code, took := s.timedCurl(guest2, lab.EchoURL)
	s.t.Logf("%s: the second guest's flow took %v (exit %d)", what, took, code)
	if code != 0 || body != lab.ExitAddr || took > limit {
		s.t.Errorf("%s: the second guest got exit %d, %q after %v; want the proxy's exit address within %v", what, code, body, took, limit)
	}
	body, code, took = s.timedCurl(s.lab.Guest(), "http://"+lab.GatewayAddr+":47831/v1/models")
	s.t.Logf("%s: the model forward took %v (exit %d)", what, took, code)
	if code != 0 || !strings.Contains(body, lab.ModelID) || took > limit {
		s.t.Errorf("%s: the model forward got exit %d, %q after %v; want the model list within %v", what, code, body, took, limit)
	}
}

// TestFairSetupSlots: a guest holds 300 connections to destinations that never answer (each
// waits for the connect timeout in a set-up slot); a second guest's flow and the model
// forward still connect at once: the flood takes its share of the set-up slots, not all.
func TestFairSetupSlots(t *testing.T) {
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, ""))
	guest2 := s.secondGuest()
	if err := s.lab.AddSilentDestinations(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	s.wantQuick("before the flood", guest2, 100*time.Millisecond)

	held := s.hold(s.lab.Guest(), 300, func(i int) string { return lab.SilentAddr(i) + ":80" })
	if held != 300 {
		t.Fatalf("the guest held %d of 300 connections", held)
	}
	// The router is busy with them: its set-up slots are taken up to the flood's share.
	var st control.Status
	if !wait.Poll(2*time.Second, func() bool { st = s.status(); return st.Budgets.Setups >= 150 }) {
		t.Fatalf("the router never held the flood's set-ups: %+v", st.Budgets)
	}
	t.Logf("flood in place: %+v", st.Budgets)
	s.wantQuick("under a flood of 300 silent connections", guest2, 100*time.Millisecond)
	s.wantNoLeak("flood")
}

// TestDescriptorFlood: the router may hold 1024 descriptors; a guest opens 1200 proxied
// connections and keeps them idle. The router refuses what is beyond its budget, and the
// model forward, `router status` and a second guest's flow still work.
func TestDescriptorFlood(t *testing.T) {
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, ""))
	guest2 := s.secondGuest()
	r, err := s.lab.StartRouterWithDescriptors(routerBin, s.cfg, 15*time.Second, 1024)
	if err != nil {
		t.Fatal(err)
	}
	s.router = r
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	held := s.hold(s.lab.Guest(), 1200, func(int) string { return lab.ServiceAddr + ":80" })
	t.Logf("the guest attempted 1200 connections; %d were not reset at once", held)
	// The router has set each of them up or refused it: it holds or counted all 1200.
	var st control.Status
	var limit uint64
	if !wait.Poll(10*time.Second, func() bool {
		st, limit = s.status(), 0
		for _, r := range st.Refusals {
			if r.Reason == refusal.Limit.String() {
				limit += r.Count
			}
		}
		return st.Budgets.Setups == 0 && st.Budgets.SetupWaiting == 0 && uint64(st.Budgets.Flows)+limit >= 1200
	}) {
		t.Fatalf("the router never accounted for the 1200 connections: %+v, %d refused over the limits", st.Budgets, limit)
	}
	t.Logf("flood in place: %d flows held, %d refused over the limits", st.Budgets.Flows, limit)

	out, code := s.routerCmd("status", "--config", s.cfg)
	if code != 0 {
		t.Errorf("router status under the flood: exit %d\n%s", code, out)
	} else {
		t.Logf("router status under the flood:\n%s", strings.Join(strings.SplitN(out, "\n", 4)[:3], "\n"))
	}
	s.wantQuick("under a descriptor flood", guest2, time.Second)
	if out, code := s.routerCmd("status", "--config", s.cfg); code != 0 {
		t.Errorf("router status after the checks: exit %d\n%s", code, out)
	}
	if strings.Contains(s.log(), "too many open files") {
		t.Errorf("the router ran out of descriptors")
	}
}
