package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/upstreamtest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// The UDP relay with fakes: an upstream whose associations are in memory
// (upstreamtest.Association) and a return path that records what it would send back.

var (
	guest  = netip.MustParseAddrPort("10.0.2.15:40000")
	guest2 = netip.MustParseAddrPort("10.0.2.16:40000")
	echo   = netip.MustParseAddrPort("203.0.113.10:7")
	echo2  = netip.MustParseAddrPort("203.0.113.11:7")
	fakeIP = netip.MustParseAddrPort("198.18.0.7:7")
	vmNet  = netip.MustParsePrefix("10.0.2.0/24")
)

// reply is one answer the return path was asked to send.
type reply struct {
	client, from netip.AddrPort
	p            string
}

// fakeReturn records replies and releases.
type fakeReturn struct {
	mu       sync.Mutex
	replies  chan reply
	released []string
}

func newFakeReturn() *fakeReturn { return &fakeReturn{replies: make(chan reply, 64)} }

func (f *fakeReturn) Reply(client, from netip.AddrPort, p []byte) error {
	f.replies <- reply{client, from, string(p)}
	return nil
}

func (f *fakeReturn) Release(client, from netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, client.String()+">"+from.String())
}

func (f *fakeReturn) releases() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.released...)
}

func (f *fakeReturn) want(t *testing.T, r reply) {
	t.Helper()
	select {
	case got := <-f.replies:
		if got != r {
			t.Errorf("reply %+v, want %+v", got, r)
		}
	case <-time.After(waitFor):
		t.Fatalf("no reply, want %+v", r)
	}
}

func (f *fakeReturn) none(t *testing.T) {
	t.Helper()
	select {
	case got := <-f.replies:
		t.Errorf("reply %+v, want none", got)
	case <-time.After(50 * time.Millisecond):
	}
}

// udpEnv is a router whose upstream "exit" is fake.
type udpEnv struct {
	t     *testing.T
	r     *Router
	up    *upstreamtest.Fake
	ret   *fakeReturn
	logs  *syncbuf.Buffer
	mu    sync.Mutex
	assoc []*upstreamtest.Association
}

// newUDPEnv makes the router with rules (VM network 10.0.2.0/24); associate, when not nil,
// answers the upstream's Associate instead of the default (a new in-memory association).
func newUDPEnv(t *testing.T, names Names, associate func() (upstream.Association, error), rs ...rules.Rule) *udpEnv {
	t.Helper()
	return newUDPEnvIn(t, []netip.Prefix{vmNet}, names, associate, rs...)
}

// newUDPEnvIn is newUDPEnv with the VM networks nets.
func newUDPEnvIn(t *testing.T, nets []netip.Prefix, names Names, associate func() (upstream.Association, error), rs ...rules.Rule) *udpEnv {
	t.Helper()
	e := &udpEnv{t: t, ret: newFakeReturn(), logs: &syncbuf.Buffer{}}
	e.up = &upstreamtest.Fake{ID: "exit", AssociateFunc: func(context.Context) (upstream.Association, error) {
		if associate != nil {
			return associate()
		}
		a := upstreamtest.NewAssociation()
		e.mu.Lock()
		e.assoc = append(e.assoc, a)
		e.mu.Unlock()
		return a, nil
	}}
	pol := Settings{
		Decision: decision(rs, nets...),
		Upstreams: []UpstreamConfig{
			{Config: upstream.Config{Name: "exit", Host: "192.0.2.1", Port: 1080}},
			{Config: upstream.Config{Name: "dead", Host: "192.0.2.2", Port: 1080}},
		},
		IdleTimeout:    time.Minute,
		ConnectTimeout: time.Second,
	}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := Options{Log: log, Original: func(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
		return netip.AddrPort{}, netip.AddrPort{}, errors.New("no tcp here")
	}}
	if names != nil {
		opts.Names = names
	}
	r, err := New(pol, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.pol.Load().ups["exit"] = e.up // the fake in place of the SOCKS5 client
	t.Cleanup(r.Close)
	e.r = r
	return e
}

func (e *udpEnv) send(src, dst netip.AddrPort, p string) {
	e.r.HandleUDP(Datagram{Src: src, Dst: dst, Payload: []byte(p)}, e.ret)
}

// association returns the i-th association opened, waiting for it.
func (e *udpEnv) association(i int) *upstreamtest.Association {
	e.t.Helper()
	var a *upstreamtest.Association
	wait.For(e.t, fmt.Sprintf("association %d", i), waitFor, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.assoc) > i {
			a = e.assoc[i]
		}
		return a != nil
	})
	return a
}

// waitLog waits (bounded) until the router's log holds want.
func (e *udpEnv) waitLog(want string) {
	e.t.Helper()
	waitLogged(e.t, e.logs, want)
}

func sent(t *testing.T, a *upstreamtest.Association, want upstream.Addr, p string) {
	t.Helper()
	select {
	case d := <-a.Sent:
		if d.Addr != want || string(d.Payload) != p {
			t.Errorf("sent %v %q, want %v %q", d.Addr, d.Payload, want, p)
		}
	case <-time.After(waitFor):
		t.Fatalf("nothing sent, want %v %q", want, p)
	}
}

func ipAddr(ap netip.AddrPort) upstream.Addr { return upstream.Addr{IP: ap.Addr(), Port: ap.Port()} }

var proxyAll = rules.Rule{Name: "vm", Action: rules.Proxy, Proxy: "exit"}

// TestUDPThroughAssociation: a guest's datagram goes through the upstream's association to
// its destination; the answer comes back to the guest from that destination.
func TestUDPThroughAssociation(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	e.send(guest, echo, "ping")
	a := e.association(0)
	sent(t, a, ipAddr(echo), "ping")
	a.Deliver(ipAddr(echo), []byte("pong"))
	e.ret.want(t, reply{guest, echo, "pong"})
	e.send(guest, echo, "again")
	sent(t, a, ipAddr(echo), "again")

	// An answer from an address the guest never sent to is dropped.
	a.Deliver(ipAddr(echo2), []byte("unsolicited"))
	e.ret.none(t)
	e.waitLog("udp answer dropped")
}

// TestUDPFakeIPName: a datagram to a fake IP goes with its name (ATYP domain); the answer,
// reported by name or by the IP the proxy resolved, comes back from the fake IP.
func TestUDPFakeIPName(t *testing.T) {
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{fakeIP.Addr(): "echo.lab.test"}}
	e := newUDPEnv(t, names, nil, proxyAll)
	e.send(guest, fakeIP, "ping")
	a := e.association(0)
	sent(t, a, upstream.Addr{Name: "echo.lab.test", Port: 7}, "ping")
	a.Deliver(upstream.Addr{Name: "echo.lab.test", Port: 7}, []byte("by name"))
	e.ret.want(t, reply{guest, fakeIP, "by name"})
	a.Deliver(ipAddr(echo), []byte("by ip"))
	e.ret.want(t, reply{guest, fakeIP, "by ip"})
	a.Deliver(upstream.Addr{Name: "echo.lab.test", Port: 8}, []byte("other port"))
	e.ret.none(t)

	// A pool address nobody was given is refused.
	e.send(guest, netip.MustParseAddrPort("198.18.0.9:7"), "nobody")
	e.ret.none(t)
	select {
	case d := <-a.Sent:
		t.Errorf("sent %v for a fake IP without a name", d)
	default:
	}
}

// TestUDPOneAssociationPerSource: one association per (source, upstream), whatever the
// destinations; another source gets its own.
func TestUDPOneAssociationPerSource(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	e.send(guest, echo, "1")
	e.send(guest, echo2, "2")
	a := e.association(0)
	sent(t, a, ipAddr(echo), "1")
	sent(t, a, ipAddr(echo2), "2")
	e.send(guest2, echo, "3")
	b := e.association(1)
	sent(t, b, ipAddr(echo), "3")
	if n := e.up.Associates(); n != 2 {
		t.Errorf("%d associations, want 2", n)
	}
	a.Deliver(ipAddr(echo2), []byte("to guest"))
	e.ret.want(t, reply{guest, echo2, "to guest"})
	b.Deliver(ipAddr(echo), []byte("to guest2"))
	e.ret.want(t, reply{guest2, echo, "to guest2"})
}

// TestUDPAssociationLost: when the control connection ends, the flows end with it (logged
// with the cause) and the next datagram opens a new association.
func TestUDPAssociationLost(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	e.send(guest, echo, "1")
	a := e.association(0)
	sent(t, a, ipAddr(echo), "1")
	a.Lose(errors.New("proxy went away"))
	e.waitLog("proxy went away")
	e.waitLog("udp flow")
	e.send(guest, echo, "2")
	b := e.association(1)
	sent(t, b, ipAddr(echo), "2")
	// The ended flow was released at the capture (its reply socket may go).
	if got := e.ret.releases(); len(got) != 1 || got[0] != guest.String()+">"+echo.String() {
		t.Errorf("released %v, want the lost flow", got)
	}
}

// TestUDPRefusedAssociation: an upstream that refuses the association drops the flow's
// datagrams (never direct) and is not asked again before udpRetry.
func TestUDPRefusedAssociation(t *testing.T) {
	refuse := func() (upstream.Association, error) {
		return nil, &upstream.Error{Upstream: "exit", Op: "associate", Err: errors.New("fake: command not supported")}
	}
	e := newUDPEnv(t, nil, refuse, proxyAll)
	e.send(guest, echo, "1")
	e.waitLog("command not supported")
	for i := range 5 {
		e.send(guest, echo, fmt.Sprint(i))
	}
	if n := e.up.Associates(); n != 1 {
		t.Errorf("%d associations asked for, want 1 before the retry delay", n)
	}
	e.ret.none(t)
	e.r.sweepUDP(time.Now().Add(udpRetry))
	e.waitLog(`action=proxy up=0 down=0`)
	e.send(guest, echo, "retry")
	wait.For(t, "a second association after the retry delay", waitFor, func() bool { return e.up.Associates() >= 2 })
	if n := e.up.Associates(); n != 2 {
		t.Errorf("%d associations asked for, want 2 after the retry delay", n)
	}
}

// TestUDPBlockAndLocal: a block rule drops, and so does a caged flow no rule decides; no
// association is opened.
func TestUDPBlockAndLocal(t *testing.T) {
	e := newUDPEnv(t, nil, nil,
		rules.Rule{Name: "no-echo", Hosts: []rules.Host{mustHost(t, "203.0.113.10")}, Action: rules.Block},
		rules.Rule{Name: "quic", Ports: []rules.PortRange{{Lo: 443, Hi: 443}}, Action: rules.Proxy, Proxy: "exit"})
	e.send(guest, echo, "blocked")
	e.send(guest, echo2, "caged, no rule")
	e.send(guest, netip.MustParseAddrPort("10.0.2.2:9999"), "the host")
	e.ret.none(t)
	if n := e.up.Associates(); n != 0 {
		t.Errorf("%d associations, want 0", n)
	}
	st := e.r.Status()
	hits, flows := st.Rules, st.Flows
	if hits[0].Hits != 1 || len(flows) != 3 {
		t.Errorf("hits %+v, live flows %d; want the block rule counted and 3 flows", hits, len(flows))
	}
	// Each dropped flow counts once as a refusal, under its reason.
	got := map[refusal.Reason]uint64{}
	for _, r := range e.r.Refusals() {
		got[r.Reason] = r.Count
	}
	want := map[refusal.Reason]uint64{refusal.Rule: 1, refusal.Caged: 2} // 10.0.2.2 is no host address here
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refusals %v, want %v", got, want)
	}
}

func mustHost(t *testing.T, s string) rules.Host {
	t.Helper()
	h, err := rules.ParseHost(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestUDPIdle: idle flows end (the capture's return path released), and their association
// closes with the last one.
func TestUDPIdle(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	e.send(guest, echo, "1")
	a := e.association(0)
	sent(t, a, ipAddr(echo), "1")
	e.r.sweepUDP(time.Now().Add(udpIdle + time.Second))
	select {
	case <-a.Done():
	case <-time.After(waitFor):
		t.Fatal("the association of idle flows stays open")
	}
	e.waitLog("end=idle")
	wait.For(t, "the return path released", waitFor, func() bool { return len(e.ret.releases()) > 0 })
	if got := e.ret.releases(); len(got) != 1 || got[0] != guest.String()+">"+echo.String() {
		t.Errorf("released %v", got)
	}
}

// TestUDPBounds: a source gets at most maxUDPSessionsPerSource associations and
// maxUDPFlowsPerSource flows; another source is not starved.
func TestUDPBounds(t *testing.T) {
	e := newUDPEnv(t, nil, nil, rules.Rule{Name: "blocked", Ports: []rules.PortRange{{Lo: 1000, Hi: 2000}}, Action: rules.Block}, proxyAll)
	for i := range maxUDPSessionsPerSource + 8 {
		e.send(netip.AddrPortFrom(guest.Addr(), uint16(20000+i)), echo, "x")
	}
	// HandleUDP counts an association (and starts its opening) before it returns: the
	// bound is kept, or not, by now; the openings themselves come after.
	e.r.udp.mu.Lock()
	opened := e.r.udp.sources[guest.Addr()].sessions
	e.r.udp.mu.Unlock()
	if opened != maxUDPSessionsPerSource {
		t.Errorf("%d associations opened for one source, want %d", opened, maxUDPSessionsPerSource)
	}
	if n := e.r.book.Count(refusal.Limit); n != 8 {
		t.Errorf("%d flows refused over the bound, want 8", n)
	}
	// Every one of them recorded (the fake counts an Associate before it records the
	// association), so the other source's below is the next one.
	e.association(opened - 1)
	if n := e.up.Associates(); n != maxUDPSessionsPerSource {
		t.Errorf("%d associations for one source, want %d", n, maxUDPSessionsPerSource)
	}
	many := netip.MustParseAddrPort("10.0.2.17:40000")
	for i := range maxUDPFlowsPerSource + 10 {
		e.send(many, netip.AddrPortFrom(echo.Addr(), uint16(1000+i)), "y")
	}
	e.r.udp.mu.Lock()
	n := e.r.udp.sources[many.Addr()].flows
	e.r.udp.mu.Unlock()
	if n != maxUDPFlowsPerSource {
		t.Errorf("%d flows for one source, want %d", n, maxUDPFlowsPerSource)
	}
	e.send(guest2, echo, "not starved")
	a := e.association(maxUDPSessionsPerSource)
	sent(t, a, ipAddr(echo), "not starved")
}

// TestUDPFailover: a failover list associates through its first member that can.
func TestUDPFailover(t *testing.T) {
	e := newUDPEnv(t, nil, nil, rules.Rule{Name: "vm", Action: rules.Proxy, Proxy: "dead,exit"})
	dead := &upstreamtest.Fake{ID: "dead"}
	td, err := upstream.Track(dead, upstream.HealthConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	te, err := upstream.Track(e.up, upstream.HealthConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := upstream.NewGroup(td, te)
	if err != nil {
		t.Fatal(err)
	}
	e.r.pol.Load().ups["dead,exit"] = g
	e.send(guest, echo, "1")
	sent(t, e.association(0), ipAddr(echo), "1")
	if dead.Associates() != 1 {
		t.Errorf("the first member was asked %d times, want 1", dead.Associates())
	}
	e.r.Close()
	e.waitLog("proxy=exit")
}

// TestSocketReturn: one socket per original destination, made at the first answer and
// closed with the last flow to it.
func TestSocketReturn(t *testing.T) {
	client, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ca := client.LocalAddr().(*net.UDPAddr).AddrPort()
	bound := 0
	s := NewSocketReturn(func(from netip.AddrPort) (*net.UDPConn, error) {
		bound++
		return net.ListenUDP("udp", net.UDPAddrFromAddrPort(from))
	})
	defer s.Close()
	from := netip.MustParseAddrPort("127.0.0.1:0")
	// Port 0 lets the kernel choose: the test needs a local address, the router binds the
	// original destination.
	if err := s.Reply(ca, from, []byte("a")); err != nil {
		t.Fatal(err)
	}
	other := netip.AddrPortFrom(ca.Addr(), ca.Port()+1)
	if err := s.Reply(other, from, []byte("b")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	client.SetReadDeadline(time.Now().Add(waitFor))
	if n, _, err := client.ReadFrom(buf); err != nil || string(buf[:n]) != "a" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if bound != 1 || s.Len() != 1 {
		t.Errorf("%d binds, %d sockets; want 1 and 1", bound, s.Len())
	}
	s.Release(ca, from)
	if s.Len() != 1 {
		t.Error("closed while a flow remains")
	}
	s.Release(other, from)
	if s.Len() != 0 {
		t.Error("open after the last flow")
	}
}

// TestUDPOwner: a local flow whose owner the policy needs is decided with the owner
// OwnerUDP finds; when it finds none (the socket is gone), the flow is refused, not sent.
func TestUDPOwner(t *testing.T) {
	app := netip.MustParseAddrPort("192.0.2.10:5000")
	gone := netip.MustParseAddrPort("192.0.2.10:5001")
	e := newUDPEnv(t, nil, nil,
		rules.Rule{Name: "vbox", Apps: []rules.App{rules.MustApp("VBoxHeadless")}, Action: rules.Proxy, Proxy: "exit"},
		rules.Rule{Name: "default", Action: rules.Direct})
	e.r.opts.OwnerUDP = func(src, dst netip.AddrPort) (rules.Owner, error) {
		if src == app {
			return rules.Owner{PID: 7, App: "VBoxHeadless"}, nil
		}
		return rules.Owner{}, errors.New("no such socket")
	}
	e.send(app, echo, "caged")
	sent(t, e.association(0), ipAddr(echo), "caged")
	e.send(gone, echo, "unknown owner")
	e.r.Close()
	e.waitLog("owner unknown")
	if n := e.up.Associates(); n != 1 {
		t.Errorf("%d associations, want 1", n)
	}
}

// TestDialUpstreamUDP: a datagram connection through an association: writes go to the
// address (a name unresolved), reads return only what comes from it.
func TestDialUpstreamUDP(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	c, err := e.r.DialUpstreamUDP(context.Background(), "exit", "dns.example:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	a := e.association(0)
	sent(t, a, upstream.Addr{Name: "dns.example", Port: 53}, "query")
	a.Deliver(ipAddr(echo), []byte("not from the resolver"))
	a.Deliver(upstream.Addr{IP: netip.MustParseAddr("192.0.2.53"), Port: 53}, []byte("answer"))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "answer" {
		t.Errorf("read %q, %v; want the resolver's answer", buf[:n], err)
	}
	c.Close()
	if _, err := c.Read(buf); err == nil {
		t.Error("read after close succeeded")
	}
}
