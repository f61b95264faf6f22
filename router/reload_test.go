package router

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// TestReloadEndsRefusedTCPFlows: a relayed flow whose rule a reload turns to block is ended
// at the reload (the client sees its connection end), counted and logged once for the rule;
// a flow the new rules still allow goes on.
func TestReloadEndsRefusedTCPFlows(t *testing.T) {
	blocked := startTarget(t, "b")
	kept := startTarget(t, "k")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	cb, ck := e.dial(blocked), e.dial(kept)
	if readN(t, cb, 1) != "b" || readN(t, ck, 1) != "k" {
		t.Fatal("no banners")
	}
	before := e.r.book.Count(refusal.Rule)
	noMore := rules.Rule{Name: "no-more", Action: rules.Block, Ports: []rules.PortRange{{Lo: blocked.Port(), Hi: blocked.Port()}}}
	if err := e.r.Apply(Settings{Decision: mustRules(t, noMore, rules.Rule{Name: "all", Action: rules.Direct}), IdleTimeout: time.Minute, ConnectTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	_ = cb.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := io.ReadAll(cb); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the refused flow: %v; want it ended at once", err)
	}
	if n := e.r.book.Count(refusal.Rule) - before; n != 1 {
		t.Errorf("%d rule refusals at the reload; want 1", n)
	}
	// The other one still echoes.
	ck.Write([]byte("ping"))
	if got := readN(t, ck, 4); got != "ping" {
		t.Errorf("the allowed flow echoed %q", got)
	}
	e.waitLog(`msg="reload ended live flows" rule=no-more flows=1`)
	e.waitLog("ended at reload: the rules now refuse it")
}

// TestReloadEndsRefusedUDPFlows: a live UDP flow whose rule a reload turns to block is ended
// at the reload; the guest's next datagrams are dropped, not sent on.
func TestReloadEndsRefusedUDPFlows(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	e.send(guest, echo, "ping")
	a := e.association(0)
	sent(t, a, ipAddr(echo), "ping")
	block := rules.Rule{Name: "no-udp", Action: rules.Block, Sources: []rules.IPRange{rules.RangeOfPrefix(netip.PrefixFrom(guest.Addr(), 32))}}
	if err := e.r.Apply(Settings{Decision: decision([]rules.Rule{block, proxyAll}, vmNet),
		Upstreams: e.r.pol.Load().Upstreams, IdleTimeout: time.Minute, ConnectTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	e.r.pol.Load().ups["exit"] = e.up
	e.waitLog(`msg="reload ended live flows" rule=no-udp flows=1`)
	e.send(guest, echo, "after")
	select {
	case d := <-a.Sent:
		t.Errorf("after the reload the association sent %q", d.Payload)
	case <-time.After(50 * time.Millisecond):
	}
	if got := e.ret.releases(); len(got) != 1 {
		t.Errorf("releases %v; want the flow's", got)
	}
}

// webTunnel starts the HTTP inbound "web", open to 127.0.0.0/8, and opens a tunnel through
// it to target, whose one-byte banner "x" it reads: the inbound, its address, the tunnel and
// its reader.
func (e *env) webTunnel(target netip.AddrPort) (Inbound, netip.AddrPort, net.Conn, *bufio.Reader) {
	e.t.Helper()
	in := Inbound{Type: InboundHTTP, Name: "web", Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	addr := e.startInbound(in)
	c, br, code := e.httpConnect(addr, target.String(), "")
	if code != 200 {
		e.t.Fatalf("CONNECT: %d", code)
	}
	if b, _ := br.ReadByte(); b != 'x' {
		e.t.Fatalf("banner %q", b)
	}
	return in, addr, c, br
}

// TestReloadEndsInboundClientsNoLongerAllowed: narrowing an inbound's allow list ends the
// tunnels of the clients it no longer names, at once, counted as forward-source.
func TestReloadEndsInboundClientsNoLongerAllowed(t *testing.T) {
	target := startTarget(t, "x")
	rule := hostRule("target", rules.Direct, "", target.Addr().String())
	rule.Ports = []rules.PortRange{{Lo: target.Port(), Hi: target.Port()}}
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{rule})}, Options{})
	in, addr, c, br := e.webTunnel(target)
	narrowed := in
	narrowed.Listen = addr
	narrowed.Allow = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	e.r.EndInboundClients(&narrowed)
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := io.ReadAll(br); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the client no longer allowed: %v; want its tunnel ended", err)
	}
	if n := e.r.book.Count(refusal.ForwardSource); n != 1 {
		t.Errorf("%d forward-source refusals; want 1", n)
	}
	e.waitLog(`msg="reload ended live flows" inbound=web flows=1`)
}
