package router

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/upstream/upstreamtest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// profileDecision: by default every caged flow goes direct; the profile "offline" lets only
// the flows to port model through.
func profileDecision(model uint16) *policy.Policy { return profileDecisionIn(model, conf.Capture{}) }

// profileDecisionIn is profileDecision with what capture cages.
func profileDecisionIn(model uint16, capture conf.Capture) *policy.Policy {
	all := rules.Rule{Name: "all", Caged: true, Action: rules.Direct}
	only := rules.Rule{Name: "model", Caged: true, Action: rules.Direct, Ports: []rules.PortRange{{Lo: model, Hi: model}}}
	cfg := &conf.Config{Rules: []rules.Rule{all}, Profiles: []conf.Profile{{Name: "offline", Rules: []rules.Rule{only}}},
		Capture: capture, DNS: conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")}}
	return policy.New(cfg, policy.Env{})
}

// openFlowLog opens a flow log in the test's directory, closed when the test ends, and returns
// it and its path.
func openFlowLog(t *testing.T) (*auditlog.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flows.jsonl")
	audit := auditlog.New(auditlog.Options{})
	if err := audit.Open(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	return audit, path
}

// waitFlowRecord waits for a record of the flow log at path that match accepts.
func waitFlowRecord(t *testing.T, path, what string, match func(map[string]any) bool) {
	t.Helper()
	wait.For(t, what+" in the flow log", waitFor, func() bool {
		return slices.ContainsFunc(readJSONLines(t, path), match)
	})
}

// switchEndsFlow switches guest to the profile offline and checks that the router names it
// key, ends its one live flow the profile refuses, live, within a second, and counts one
// caged refusal for it.
func (e *env) switchEndsFlow(guest, key string, live net.Conn) {
	e.t.Helper()
	t := e.t
	before := e.r.book.Count(refusal.Caged)
	start := time.Now()
	got, ended, err := e.r.SwitchProfile(guest, "offline")
	if err != nil {
		t.Fatal(err)
	}
	if got != key || ended != 1 {
		t.Errorf("switch: guest %q, %d flows ended; want %s, 1", got, ended, key)
	}
	_ = live.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.ReadAll(live); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the refused flow: %v; want it ended within a second", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the refused flow ended %v after the switch; want within a second", d)
	}
	if n := e.r.book.Count(refusal.Caged) - before; n != 1 {
		t.Errorf("%d caged refusals at the switch; want 1", n)
	}
}

// stillEcho checks that each of cs still echoes (the switch did not end it).
func stillEcho(t *testing.T, cs ...*net.TCPConn) {
	t.Helper()
	for _, c := range cs {
		c.Write([]byte("ping"))
		if got := readN(t, c, 4); got != "ping" {
			t.Errorf("a flow the switch must not end echoed %q", got)
		}
	}
}

// TestProfileSwitchEndsRefusedFlows: switching a guest to a profile ends, within a second,
// its live flows the profile refuses, counted as refusals; its flows the profile allows and
// another guest's flows go on; its new flows are decided by the profile; back on the
// default profile they are allowed again.
func TestProfileSwitchEndsRefusedFlows(t *testing.T) {
	web := startTarget(t, "w")
	model := startTarget(t, "m")
	audit, path := openFlowLog(t)
	e := newEnv(t, Settings{Decision: profileDecision(model.Port())}, Options{FromVM: func(netip.Addr) bool { return true }, Audit: audit})
	other := netip.MustParseAddr("127.0.0.2")
	cw, cm, co := e.dial(web), e.dial(model), e.dialFrom(other, web)
	if readN(t, cw, 1) != "w" || readN(t, cm, 1) != "m" || readN(t, co, 1) != "w" {
		t.Fatal("no banners")
	}
	e.switchEndsFlow("127.0.0.1", "vm 127.0.0.1", cw)
	stillEcho(t, cm, co)
	e.waitLog(`msg="profile switch ended live flows" rule=`)
	if got := e.r.GuestProfiles(); len(got) != 1 || got["vm 127.0.0.1"] != "offline" {
		t.Errorf("GuestProfiles = %v", got)
	}
	wantReset(t, e.dial(web))
	if c := e.dialFrom(other, web); readN(t, c, 1) != "w" {
		t.Error("the other guest's new flow was not let through")
	}
	if _, _, err := e.r.SwitchProfile("127.0.0.1", policy.DefaultProfile); err != nil {
		t.Fatal(err)
	}
	if c := e.dial(web); readN(t, c, 1) != "w" {
		t.Error("back on the default profile, the guest's new flow was not let through")
	}
	if got := e.r.GuestProfiles(); len(got) != 0 {
		t.Errorf("GuestProfiles = %v after the switch back", got)
	}
	// The flow log names the profile that refused the guest's new flow.
	waitFlowRecord(t, path, "a refusal by profile offline", func(m map[string]any) bool {
		return m["event"] == "refused" && m["profile"] == "offline" && m["rule"] == policy.StepCaged.String()
	})
}

func TestSwitchProfileErrors(t *testing.T) {
	e := newEnv(t, Settings{Decision: profileDecision(1)}, Options{})
	if _, _, err := e.r.SwitchProfile("127.0.0.1", "nope"); !errors.Is(err, ErrNoProfile) {
		t.Errorf("unknown profile: %v", err)
	}
	if _, _, err := e.r.SwitchProfile("10.9.0.0/16", "offline"); err == nil || !strings.Contains(err.Error(), "vm_networks") {
		t.Errorf("a network that is no guest's: %v", err)
	}
	if _, _, err := e.r.SwitchProfile("guest1", "offline"); err == nil {
		t.Error("a name was taken for a guest")
	}
}

// withProfile is decision(rs, nets...) with a profile name of rules prs.
func withProfile(rs []rules.Rule, name string, prs []rules.Rule, nets ...netip.Prefix) *policy.Policy {
	cfg := &conf.Config{Rules: rs, Profiles: []conf.Profile{{Name: name, Rules: prs}}, Capture: conf.Capture{VMNetworks: nets},
		DNS: conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")}}
	return policy.New(cfg, policy.Env{})
}

// switchEndsUDPFlow gives the router rule r and a profile offline with no rules, starts a
// UDP flow from src to echo through its association (returned), then switches guest to
// offline and checks that the router names it key and ends the one flow.
func (e *udpEnv) switchEndsUDPFlow(src netip.AddrPort, r rules.Rule, guest, key string) *upstreamtest.Association {
	e.t.Helper()
	st := e.r.pol.Load().Settings
	st.Decision = withProfile([]rules.Rule{r}, "offline", nil, vmNet)
	if err := e.r.Apply(st); err != nil {
		e.t.Fatal(err)
	}
	e.r.pol.Load().ups["exit"] = e.up // shared by the profiles
	e.send(src, echo, "ping")
	a := e.association(0)
	sent(e.t, a, ipAddr(echo), "ping")
	got, ended, err := e.r.SwitchProfile(guest, "offline")
	if err != nil || got != key || ended != 1 {
		e.t.Fatalf("switch: %q, %d ended, %v; want 1 flow of %s", got, ended, err, key)
	}
	e.waitLog(`msg="profile switch ended live flows"`)
	return a
}

// TestProfileSwitchEndsUDPFlows: a guest's live UDP flow its new profile refuses is ended at
// the switch; its next datagrams are dropped, not sent on.
func TestProfileSwitchEndsUDPFlows(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	a := e.switchEndsUDPFlow(guest, proxyAll, vmNet.String(), "vm "+vmNet.String())
	e.send(guest, echo, "after")
	select {
	case d := <-a.Sent:
		t.Errorf("after the switch the association sent %q", d.Payload)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestProfileSwitchAcrossReload: a reload keeps a guest's switch while the new config has
// the profile, and puts the guest back on the default rules when it has not.
func TestProfileSwitchAcrossReload(t *testing.T) {
	web := startTarget(t, "w")
	e := newEnv(t, Settings{Decision: profileDecision(1)}, Options{FromVM: func(netip.Addr) bool { return true }})
	if _, _, err := e.r.SwitchProfile("127.0.0.1", "offline"); err != nil {
		t.Fatal(err)
	}
	wantReset(t, e.dial(web))
	st := e.r.pol.Load().Settings
	if err := e.r.Apply(st); err != nil {
		t.Fatal(err)
	}
	if got := e.r.GuestProfiles(); got["vm 127.0.0.1"] != "offline" {
		t.Errorf("after a reload with the profile: %v", got)
	}
	wantReset(t, e.dial(web))
	st.Decision = mustRules(t, rules.Rule{Name: "all", Caged: true, Action: rules.Direct})
	if err := e.r.Apply(st); err != nil {
		t.Fatal(err)
	}
	if got := e.r.GuestProfiles(); len(got) != 0 {
		t.Errorf("after a reload without the profile: %v", got)
	}
	e.waitLog(`guest back on the default profile`)
	if c := e.dial(web); readN(t, c, 1) != "w" {
		t.Error("back on the default rules, the guest's flow was not let through")
	}
}

// TestProfileSwitchEndsInboundTunnels: a guest's tunnel through an inbound is a flow of that
// guest: a switch to a profile that refuses it ends it.
func TestProfileSwitchEndsInboundTunnels(t *testing.T) {
	target := startTarget(t, "x")
	e := newEnv(t, Settings{Decision: profileDecision(1)}, Options{})
	_, addr, c, br := e.webTunnel(target)
	if _, ended, err := e.r.SwitchProfile("127.0.0.1", "offline"); err != nil || ended != 1 {
		t.Fatalf("switch: %d ended, %v; want 1", ended, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := io.ReadAll(br); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the tunnel: %v; want it ended", err)
	}
	if _, _, code := e.httpConnect(addr, target.String(), ""); code == 200 {
		t.Error("a new tunnel of the switched guest was let through")
	}
}

// appProfileDecision is profileDecision with the caged apps slirp4netns and pasta
// ([capture] caged_apps) and no VM network: their flows are caged by their owner.
func appProfileDecision(t *testing.T, model uint16) *policy.Policy {
	t.Helper()
	var apps []rules.App
	for _, s := range []string{"slirp4netns", "pasta"} {
		a, err := rules.ParseApp(s)
		if err != nil {
			t.Fatal(err)
		}
		apps = append(apps, a)
	}
	return profileDecisionIn(model, conf.Capture{CagedApps: apps})
}

// ownersBySource is an owner lookup that names the process by the flow's source address:
// 127.0.0.1 is slirp4netns (were its command name "pasta", a name it set, it would not count:
// rules.Owner has no field for it), 127.0.0.2 pasta, any other address an uncaged curl.
func ownersBySource(_ *net.TCPConn, src, _ netip.AddrPort) (rules.Owner, error) {
	switch src.Addr() {
	case netip.MustParseAddr("127.0.0.1"):
		return rules.Owner{PID: 41, App: "slirp4netns", AppPath: "/usr/bin/slirp4netns"}, nil
	case netip.MustParseAddr("127.0.0.2"):
		return rules.Owner{PID: 42, App: "pasta", AppPath: "/usr/bin/pasta"}, nil
	}
	return rules.Owner{PID: 43, App: "curl", AppPath: "/usr/bin/curl"}, nil
}

// TestProfileSwitchCagedApp: a caged app switched by its executable's name (app:NAME) has
// its live flows the profile refuses ended within a second and counted, its new flows
// decided by the profile (the flow log names it); another caged app's flows and an uncaged
// process's are not touched; back on the default its flows are allowed again.
func TestProfileSwitchCagedApp(t *testing.T) {
	web := startTarget(t, "w")
	model := startTarget(t, "m")
	audit, path := openFlowLog(t)
	e := newEnv(t, Settings{Decision: appProfileDecision(t, model.Port())}, Options{Owner: ownersBySource, Audit: audit})
	pasta, curl := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	cw, cm, cp, cc := e.dial(web), e.dial(model), e.dialFrom(pasta, web), e.dialFrom(curl, web)
	for _, c := range []*net.TCPConn{cw, cp, cc} {
		if readN(t, c, 1) != "w" {
			t.Fatal("no banner")
		}
	}
	if readN(t, cm, 1) != "m" {
		t.Fatal("no banner")
	}
	e.switchEndsFlow("app:Slirp4netns", "app slirp4netns", cw)
	stillEcho(t, cm, cp, cc)
	if got := e.r.GuestProfiles(); len(got) != 1 || got["app slirp4netns"] != "offline" {
		t.Errorf("GuestProfiles = %v", got)
	}
	wantReset(t, e.dial(web))
	if c := e.dial(model); readN(t, c, 1) != "m" {
		t.Error("the profile's allowed flow of the switched app was not let through")
	}
	for _, src := range []netip.Addr{pasta, curl} {
		if c := e.dialFrom(src, web); readN(t, c, 1) != "w" {
			t.Errorf("the new flow of %v (not switched) was not let through", src)
		}
	}
	if _, _, err := e.r.SwitchProfile("app:slirp4netns", policy.DefaultProfile); err != nil {
		t.Fatal(err)
	}
	if c := e.dial(web); readN(t, c, 1) != "w" {
		t.Error("back on the default profile, the app's new flow was not let through")
	}
	waitFlowRecord(t, path, "a refusal of slirp4netns by profile offline", func(m map[string]any) bool {
		return m["event"] == "refused" && m["profile"] == "offline" && m["app"] == "slirp4netns"
	})
}

// TestProfileSwitchAppByCommand: a process is the app of a switch by its executable, never
// by the name it gives itself: slirp4netns calling itself "pasta" is not switched with
// pasta.
func TestProfileSwitchAppByCommand(t *testing.T) {
	web := startTarget(t, "w")
	e := newEnv(t, Settings{Decision: appProfileDecision(t, 1)}, Options{Owner: ownersBySource})
	if _, _, err := e.r.SwitchProfile("app:pasta", "offline"); err != nil {
		t.Fatal(err)
	}
	wantReset(t, e.dialFrom(netip.MustParseAddr("127.0.0.2"), web))
	if c := e.dial(web); readN(t, c, 1) != "w" {
		t.Error("slirp4netns, named pasta by its command name, was switched with pasta")
	}
}

func TestSwitchProfileAppErrors(t *testing.T) {
	e := newEnv(t, Settings{Decision: appProfileDecision(t, 1)}, Options{Owner: ownersBySource})
	for _, g := range []string{"app:curl", "app:", "app:slirp*", "app:/usr/bin/slirp4netns"} {
		if _, _, err := e.r.SwitchProfile(g, "offline"); err == nil {
			t.Errorf("%s: switched", g)
		}
	}
	if got := e.r.GuestProfiles(); len(got) != 0 {
		t.Errorf("GuestProfiles = %v after refused switches", got)
	}
}

// TestProfileSwitchCagedAppUDP: a caged app's live UDP flow its new profile refuses is
// ended at the switch (its owner known from the UDP owner lookup); its next datagrams are
// dropped, not sent on.
func TestProfileSwitchCagedAppUDP(t *testing.T) {
	app := netip.MustParseAddrPort("192.0.2.10:5000")
	vbox := rules.Rule{Name: "vbox", Apps: []rules.App{rules.MustApp("VBoxHeadless")}, Action: rules.Proxy, Proxy: "exit"}
	e := newUDPEnv(t, nil, nil, vbox)
	e.r.opts.OwnerUDP = func(src, dst netip.AddrPort) (rules.Owner, error) {
		return rules.Owner{PID: 7, App: "VBoxHeadless"}, nil
	}
	a := e.switchEndsUDPFlow(app, vbox, "app:VBoxHeadless", "app vboxheadless")
	e.send(app, echo, "after") // decided and dropped before HandleUDP returns
	t2 := &e.r.udp
	t2.mu.Lock()
	fl := t2.flows[udpFlowKey{app, echo}]
	if fl == nil || !fl.drop || fl.rec.pol == nil || fl.rec.pol.profile != "offline" {
		t.Errorf("the app's flow after the switch: %+v; want dropped by profile offline", fl)
	}
	t2.mu.Unlock()
	select {
	case d := <-a.Sent:
		t.Errorf("after the switch the association sent %q", d.Payload)
	default:
	}
}

// TestProfileSwitchAppAcrossReload: a reload that no longer cages a switched app forgets its
// switch (logged), as one that drops its profile does.
func TestProfileSwitchAppAcrossReload(t *testing.T) {
	e := newEnv(t, Settings{Decision: appProfileDecision(t, 1)}, Options{Owner: ownersBySource})
	if _, _, err := e.r.SwitchProfile("app:pasta", "offline"); err != nil {
		t.Fatal(err)
	}
	st := e.r.pol.Load().Settings
	if err := e.r.Apply(st); err != nil {
		t.Fatal(err)
	}
	if got := e.r.GuestProfiles(); got["app pasta"] != "offline" {
		t.Errorf("after a reload that still cages pasta: %v", got)
	}
	st.Decision = profileDecision(1) // the profile, no caged app
	if err := e.r.Apply(st); err != nil {
		t.Fatal(err)
	}
	if got := e.r.GuestProfiles(); len(got) != 0 {
		t.Errorf("after a reload that cages no app: %v", got)
	}
	e.waitLog(`the config cages no such app now`)
}
