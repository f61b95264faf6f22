package redirect

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/internal/clock/clocktest"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/windivert/packet"
)

// fakeDev is a Device in memory: Read takes packets from in, Write records.
type fakeDev struct {
	canPass bool
	in      chan written

	mu      sync.Mutex
	out     []written
	closed  bool
	closeCh chan struct{}
}

type written struct {
	b []byte
	m Meta
}

func newFakeDev(canPass bool) *fakeDev {
	return &fakeDev{canPass: canPass, in: make(chan written, 64), closeCh: make(chan struct{})}
}

func (d *fakeDev) Read(buf []byte, metas []Meta) (int, int, error) {
	select {
	case w := <-d.in:
		metas[0] = w.m
		return copy(buf, w.b), 1, nil
	case <-d.closeCh:
		return 0, 0, errors.New("fake device closed")
	}
}

func (d *fakeDev) Write(b []byte, m Meta) error {
	if m.Outbound && !d.canPass {
		return ErrCannotPass
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("fake device closed")
	}
	d.out = append(d.out, written{b: append([]byte(nil), b...), m: m})
	return nil
}

func (d *fakeDev) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.closeCh)
	}
	return nil
}

// take returns what was written since the last take.
func (d *fakeDev) take() []written {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.out
	d.out = nil
	return out
}

// fakeResolver describes PIDs from a table and counts calls.
type fakeResolver struct {
	mu    sync.Mutex
	infos map[uint32]rules.Owner
	calls int
}

func (r *fakeResolver) ByPID(pid uint32) (rules.Owner, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if i, ok := r.infos[pid]; ok {
		return i, nil
	}
	return rules.Owner{}, proc.ErrNoProcess
}

// fakeLookup answers owner lookups from a table keyed by the local address.
type fakeLookup struct {
	mu     sync.Mutex
	owners map[netip.AddrPort]rules.Owner
	calls  []netip.AddrPort
}

func (l *fakeLookup) lookup(_ uint8, local, _ netip.AddrPort) (rules.Owner, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, local)
	if i, ok := l.owners[local]; ok {
		return i, nil
	}
	return rules.Owner{}, errors.New("no such socket")
}

func (l *fakeLookup) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// fakeDNS answers every query with a fixed reply that echoes the query ID.
type fakeDNS struct {
	mu      sync.Mutex
	queries [][]byte
	srcs    []dns.Source // who asked each query
}

func (d *fakeDNS) HandleWireFrom(_ context.Context, src dns.Source, q []byte, _ bool) []byte {
	d.mu.Lock()
	d.queries = append(d.queries, append([]byte(nil), q...))
	d.srcs = append(d.srcs, src)
	d.mu.Unlock()
	if len(q) < 2 {
		return nil
	}
	return append([]byte{q[0], q[1], 0x81, 0x80}, "answer"...)
}

// sources returns who asked the queries so far, in order.
func (d *fakeDNS) sources() []dns.Source {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]dns.Source(nil), d.srcs...)
}

// Fixture addresses.
var (
	appA     = netip.MustParseAddrPort("192.0.2.10:50123")
	appA6    = netip.MustParseAddrPort("[2001:db8::10]:50123")
	proxied  = netip.MustParseAddrPort("203.0.113.10:443")
	proxied6 = netip.MustParseAddrPort("[2001:db8:113::10]:443")
	blocked  = netip.MustParseAddrPort("203.0.113.66:443")
	direct   = netip.MustParseAddrPort("198.51.100.20:80")
	poolDst  = netip.MustParseAddrPort("198.18.0.5:80")
	dnsSrv   = netip.MustParseAddrPort("203.0.113.53:53")
)

const lport = 47100

// testRules: block 203.0.113.66, proxy curl.exe and 203.0.113.0/24 and 2001:db8:113::/48,
// default direct.
func testRules(t testing.TB, extra ...rules.Rule) *policy.Policy {
	t.Helper()
	host := func(s string) rules.Host {
		h, err := rules.ParseHost(s)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	rs := append([]rules.Rule{}, extra...)
	rs = append(rs,
		rules.Rule{Name: "block", Hosts: []rules.Host{host("203.0.113.66")}, Action: rules.Block},
		rules.Rule{Name: "proxy", Hosts: []rules.Host{host("203.0.113.0/24"), host("2001:db8:113::/48")}, Action: rules.Proxy, Proxy: "exit"},
		rules.Rule{Name: "default", Action: rules.Direct},
	)
	return testPolicy(rs)
}

// testPolicy compiles rs with the default fake-IP pool.
func testPolicy(rs []rules.Rule) *policy.Policy {
	cfg := &conf.Config{Rules: rs, DNS: conf.DNS{Mode: conf.DNSFakeIP, Capture: conf.DNSCaptureAll, Pool: netip.MustParsePrefix("198.18.0.0/15")}}
	return policy.New(cfg, policy.Env{})
}

func appRule(app string, action rules.Action) rules.Rule {
	r := rules.Rule{Name: "app-" + app, Apps: []rules.App{rules.MustApp(app)}, Action: action}
	if action == rules.Proxy {
		r.Proxy = "exit"
	}
	return r
}

// parsePolicy compiles the config text (named name in errors) judged for goos, over
// policytest.Env.
func parsePolicy(t *testing.T, name, text, goos string) *policy.Policy {
	t.Helper()
	cfg, err := conf.Parse(name, []byte(text), conf.Options{SkipSecrets: true, OS: goos})
	if err != nil {
		t.Fatal(err)
	}
	return policy.New(cfg, policytest.Env())
}

// firstPacket sends a flow's first packet from src to dst, a SYN or (UDP) a DNS query's
// header, and returns what the engine wrote for it.
func firstPacket(t *testing.T, e *Engine, dev *fakeDev, src, dst netip.AddrPort, tcp bool) []parsed {
	t.Helper()
	b := udpPkt(src, dst, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00")
	if tcp {
		b = tcpPkt(src, dst, syn, 1, 0, "")
	}
	send(e, b, outMeta)
	return decode(t, dev.take())
}

// did names what the engine did with the first packet of a flow to dst (tcp: a TCP one)
// by what it wrote for it, ps: "drop" (nothing), "pass" (sent on), "refuse" (a RST back),
// "answer" (a datagram back from dst: a DNS answer), "reflect-dns" (turned in to dnsPort, 0:
// none) or "reflect" (turned in to the listener).
func did(ps []parsed, dst netip.AddrPort, tcp bool, dnsPort uint16) string {
	switch {
	case len(ps) == 0:
		return "drop"
	case ps[0].m.Outbound:
		return "pass"
	case ps[0].flags&packet.TCPRst != 0:
		return "refuse"
	case !tcp && ps[0].src == dst:
		return "answer"
	case dnsPort != 0 && ps[0].dst.Port() == dnsPort:
		return "reflect-dns"
	}
	return "reflect"
}

// newTest returns an engine over a fake device and clock.
func newTest(t *testing.T, canPass bool, tbl *policy.Policy, opts Options) (*Engine, *fakeDev, *clocktest.Clock) {
	t.Helper()
	dev := newFakeDev(canPass)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	opts.Clock = clk
	if opts.ListenerPort == 0 {
		opts.ListenerPort = lport
	}
	e, err := New(dev, tbl, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.workers.Wait() })
	return e, dev, clk
}

type spec = packet.Spec

func tcpPkt(src, dst netip.AddrPort, flags uint8, seq, ack uint32, payload string) []byte {
	return packet.MustBuild(spec{Src: src, Dst: dst, Proto: packet.ProtoTCP, TCPFlags: flags, Seq: seq, Ack: ack,
		TCPOptions: []byte{2, 4, 5, 0xb4}, Payload: []byte(payload)})
}

func udpPkt(src, dst netip.AddrPort, payload string) []byte {
	return packet.MustBuild(spec{Src: src, Dst: dst, Proto: packet.ProtoUDP, Payload: []byte(payload)})
}

var outMeta = Meta{Outbound: true, ChecksumsValid: true, IfIdx: 7, SubIfIdx: 1}

// send hands one outbound packet to the engine and waits for the workers it started.
func send(e *Engine, b []byte, m Meta) {
	e.inputBatch(append([]byte(nil), b...), []Meta{m})
	e.workers.Wait()
}

// parsed is a written packet, decoded for assertions.
type parsed struct {
	src, dst netip.AddrPort
	flags    uint8
	seq, ack uint32
	payload  string
	m        Meta
	valid    bool
	proto    uint8
}

func (p parsed) String() string {
	dir := "in"
	if p.m.Outbound {
		dir = "out"
	}
	return dir + " " + p.src.String() + "->" + p.dst.String()
}

func decode(t *testing.T, ws []written) []parsed {
	t.Helper()
	var out []parsed
	for _, w := range ws {
		p, err := packet.Parse(w.b)
		if err != nil {
			t.Fatalf("engine wrote an unparsable packet: %v", err)
		}
		out = append(out, parsed{
			src: netip.AddrPortFrom(p.Src(), p.SrcPort()), dst: netip.AddrPortFrom(p.Dst(), p.DstPort()),
			flags: p.TCPFlags(), seq: p.Seq(), ack: p.Ack(), payload: string(p.Payload()), m: w.m,
			valid: p.ChecksumsValid(), proto: p.Protocol(),
		})
	}
	return out
}

// wantOne asserts that exactly one packet was written and returns it.
func wantOne(t *testing.T, dev *fakeDev) parsed {
	t.Helper()
	ps := decode(t, dev.take())
	if len(ps) != 1 {
		t.Fatalf("wrote %d packets %v, want 1", len(ps), ps)
	}
	if !ps[0].valid {
		t.Fatalf("written packet %v has invalid checksums", ps[0])
	}
	return ps[0]
}

func wantNone(t *testing.T, dev *fakeDev) {
	t.Helper()
	if ps := decode(t, dev.take()); len(ps) != 0 {
		t.Fatalf("wrote %v, want nothing", ps)
	}
}
