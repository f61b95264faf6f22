package router

import (
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestSpoofCases: each spoofing case on each of its paths: the transparent listener
// (spoofCaseTransparent) and both inbounds (spoofCaseInbound).
func TestSpoofCases(t *testing.T) {
	dec := casePolicy(t, "spoof.toml", policytest.SpoofConfig, policytest.Env())
	p := startProxy(t, nil, nil) // it dials loopback only: no case's traffic leaves
	for _, c := range policytest.SpoofCases() {
		if c.Paths&policytest.Transparent != 0 {
			t.Run(c.Name+"/transparent", func(t *testing.T) { spoofCaseTransparent(t, dec, p, c) })
		}
		if c.Paths&policytest.Inbound != 0 {
			eachInbound(t, c.Name, func(t *testing.T, typ InboundType) { spoofCaseInbound(t, dec, p, c, typ) })
		}
	}
}

// spoofCaseTransparent: through the transparent listener, a name the guest writes in
// its first bytes (a ClientHello's server name, an HTTP Host) picks the rule but never where
// a direct dial goes: the relay resolves the name through the router's resolver, the walls
// check every address, and the dial goes there (the tests' dialer refuses every address but
// loopback, so the error names the address tried), never to the address the guest chose;
// the flow log says the name was not trusted.
func spoofCaseTransparent(t *testing.T, dec *policy.Policy, p *socks5test.Server, c policytest.SpoofCase) {
	fl := c.Flow
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{},
		Resolved: map[string][]netip.Addr{fl.Sniffed: fl.Resolved}}
	e := newEnv(t, exitSettings(dec, p.Addr.Port()), caseOptions(fl, netip.AddrPortFrom(fl.Dst, fl.Port), names))
	before := len(p.Asked())
	e.dialCapture(firstBytes(t, c.From, fl.Sniffed))
	e.wantRecorded("relay", c.Action, c.Rule)
	logs := e.logs.String()
	spoofed := "not " + netip.AddrPortFrom(fl.Dst, fl.Port).String()
	if c.Action == rules.Direct {
		// The dial failed (the tests dial loopback only): wait for the flow's end.
		e.waitLog("err=")
		logs = e.logs.String()
		tried := false
		for _, a := range append([]netip.Addr{c.Dial}, fl.Resolved...) {
			tried = tried || strings.Contains(logs, "not "+netip.AddrPortFrom(a, fl.Port).String())
		}
		if !tried {
			t.Errorf("no dial to %v (or the name's other addresses %v):\n%s", c.Dial, fl.Resolved, logs)
		}
	}
	if c.Dial != fl.Dst && strings.Contains(logs, spoofed) {
		t.Errorf("dialed the address the guest chose:\n%s", logs)
	}
	if got := strings.Contains(logs, "name_untrusted=true"); got != c.Untrusted {
		t.Errorf("flow log name_untrusted=%v, want %v:\n%s", got, c.Untrusted, logs)
	}
	asked := p.Asked()[before:]
	if (c.Action == rules.Proxy) != (len(asked) == 1 && asked[0] == fl.Sniffed) {
		t.Errorf("the proxy was asked for %q", asked)
	}
	want := 0
	if fl.Resolved != nil {
		want = 1
	}
	if n := len(names.Lookups()); n != want {
		t.Errorf("%d lookups of the name, want %d", n, want)
	}
}

// spoofCaseInbound: a name an inbound's client asks for is dialed as the router
// resolves it, every address through the walls, on the inbound of type typ.
func spoofCaseInbound(t *testing.T, dec *policy.Policy, p *socks5test.Server, c policytest.SpoofCase, typ InboundType) {
	fl := c.Flow
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{},
		Resolved: map[string][]netip.Addr{fl.Host: fl.Resolved}}
	e := newEnv(t, exitSettings(dec, p.Addr.Port()), Options{Names: names, Resolve: noLocalResolve(t)})
	addr := e.startInbound(Inbound{Type: typ})
	if typ == InboundSOCKS5 {
		e.socksConnect(addr, socks5.Addr{Name: fl.Host, Port: fl.Port})
	} else {
		e.httpConnect(addr, net.JoinHostPort(fl.Host, strconv.Itoa(int(fl.Port))), "")
	}
	e.wantRecorded("inbound", c.Action, c.Rule)
	if c.Action == rules.Direct {
		want := "not " + netip.AddrPortFrom(c.Dial, fl.Port).String()
		e.waitLog(want)
	}
}

// TestReloadEndsFlowsANameWouldNowSendByName: a flow that went direct to its address (a rule
// by address decided it) is ended when a reload makes the name of its first bytes win a
// direct rule instead: under the new rules that name would not be trusted to pick the
// address, so the flow may not keep it.
func TestReloadEndsFlowsANameWouldNowSendByName(t *testing.T) {
	target := startTarget(t, "t")
	byAddr := hostRule("lab", rules.Direct, "", "198.51.100.0/24")
	other := hostRule("other", rules.Block, "", "*.other.test") // a name rule: the router reads names
	corp := hostRule("corp", rules.Direct, "", "*.corp.test")
	src := netip.MustParseAddrPort("10.0.2.15:40000")
	opts := Options{
		Original: func(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) { return src, public(target), nil },
		FromVM:   func(netip.Addr) bool { return true },
	}
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{other, byAddr}, vmNet)}, opts)
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	c.Write(firstBytes(t, "host", "x.corp.test"))
	if got := readN(t, c, 1); got != "t" {
		t.Fatalf("banner %q", got)
	}
	if err := e.r.Apply(Settings{Decision: decision([]rules.Rule{other, corp, byAddr}, vmNet), IdleTimeout: time.Minute, ConnectTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the flow: %v; want it ended at the reload", err)
	}
	e.waitLog(`msg="reload ended live flows" rule=corp flows=1`)
}
