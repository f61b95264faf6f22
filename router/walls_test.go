package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/router/upstream/upstreamtest"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/rules/refusal"
)

// The host walls through every data path: the shared wall cases (policytest.WallCases)
// through the transparent TCP listener, the UDP relay and both inbounds, each deciding as
// the policy does, and counting each refusal under its reason.

func wallPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	return casePolicy(t, "walls.toml", policytest.WallConfig, policytest.WallEnv())
}

// wallNames gives a case's name to the fake IP and resolves it as the case says.
func wallNames(fl policy.Flow) *dnstest.Names {
	n := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{},
		Resolved: map[string][]netip.Addr{}}
	if fl.Host != "" {
		n.Names[policytest.PoolAddr] = fl.Host
		n.Resolved[fl.Host] = fl.Resolved
	}
	return n
}

// wantRefusal checks that a refused case was counted once under its step's reason.
func wantRefusal(t *testing.T, r *Router, c policytest.WallCase) {
	t.Helper()
	if c.Action != rules.Block {
		return
	}
	want := refusal.ForStep(c.Step)
	got := r.Refusals()
	if len(got) != 1 || got[0].Reason != want || got[0].Count != 1 {
		t.Errorf("refusals %+v, want one %v", got, want)
	}
}

func TestWallCasesTransparentTCP(t *testing.T) {
	dec := wallPolicy(t)
	p := startProxy(t, nil, nil)
	for _, c := range policytest.WallCases() {
		if c.Paths&policytest.Transparent == 0 || c.Flow.Network != rules.TCP {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			fl := c.Flow
			dst := netip.AddrPortFrom(fl.Dst, fl.Port)
			if fl.Host != "" {
				dst = netip.AddrPortFrom(policytest.PoolAddr, fl.Port)
			}
			e := newEnv(t, exitSettings(dec, p.Addr.Port()), caseOptions(fl, dst, wallNames(fl)))
			e.wantDecided(c.Action, c.Rule)
			wantRefusal(t, e.r, c)
		})
	}
}

func TestWallCasesInbound(t *testing.T) {
	dec := wallPolicy(t)
	p := startProxy(t, nil, nil)
	for _, c := range policytest.WallCases() {
		if c.Paths&policytest.Inbound == 0 {
			continue
		}
		eachInbound(t, c.Name, func(t *testing.T, typ InboundType) {
			fl := c.Flow
			e := newEnv(t, exitSettings(dec, p.Addr.Port()), Options{Names: wallNames(fl), Resolve: noLocalResolve(t)})
			addr := e.startInbound(Inbound{Type: typ})
			host := fl.Host
			if host == "" {
				host = fl.Dst.String()
			}
			refused := false
			if typ == InboundSOCKS5 {
				dst := socks5.Addr{Name: fl.Host, IP: fl.Dst, Port: fl.Port}
				_, code := e.socksConnect(addr, dst)
				refused = code == 0x02 // not allowed by the ruleset
			} else {
				_, _, status := e.httpConnect(addr, net.JoinHostPort(host, strconv.Itoa(int(fl.Port))), "")
				refused = status == http.StatusForbidden
			}
			if refused != (c.Action == rules.Block) {
				t.Errorf("refused: %v; want %v", refused, c.Action == rules.Block)
			}
			e.wantRecorded("inbound", c.Action, c.Rule)
			wantRefusal(t, e.r, c)
		})
	}
}

func TestWallCasesUDP(t *testing.T) {
	dec := wallPolicy(t)
	for _, c := range policytest.WallCases() {
		if c.Paths&policytest.Transparent == 0 || c.Flow.Network != rules.UDP {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			fl := c.Flow
			dst := netip.AddrPortFrom(fl.Dst, fl.Port)
			if fl.Host != "" {
				dst = netip.AddrPortFrom(policytest.PoolAddr, fl.Port)
			}
			up := &upstreamtest.Fake{ID: "exit"}
			logs := &syncbuf.Buffer{}
			opts := Options{
				Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Original: func(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
					return netip.AddrPort{}, netip.AddrPort{}, errors.New("no tcp here")
				},
				// The router's own sockets may reach loopback only: a direct flow's socket
				// fails, after the decision.
				Control: func(_, address string, _ syscall.RawConn) error {
					if ap, err := netip.ParseAddrPort(address); err == nil && !ap.Addr().IsLoopback() && !ap.Addr().IsUnspecified() {
						return fmt.Errorf("the tests send to loopback only, not %v", ap)
					}
					return nil
				},
				FromVM: func(netip.Addr) bool { return fl.FromVM },
				Names:  wallNames(fl),
			}
			r, err := New(Settings{Decision: dec, IdleTimeout: time.Minute, ConnectTimeout: time.Second,
				Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "192.0.2.1", Port: 1080}}}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			r.pol.Load().ups["exit"] = up
			t.Cleanup(r.Close)
			r.HandleUDP(Datagram{Src: netip.AddrPortFrom(fl.Src, 40000), Dst: dst, Payload: []byte("x")}, newFakeReturn())
			var row *RuleHits
			_ = wait.Poll(waitFor, func() bool {
				st := r.Status()
				for i := range st.Rules {
					if st.Rules[i].Hits > 0 {
						row = &st.Rules[i]
					}
				}
				return row != nil
			})
			if row == nil || row.Rule.Name != c.Rule || row.Rule.Action != c.Action {
				t.Fatalf("status row %+v, want %s by %q\n%s", row, c.Action, c.Rule, logs.String())
			}
			wantRefusal(t, r, c)
			if c.Action == rules.Block && up.Associates() != 0 {
				t.Errorf("%d associations for a refused flow", up.Associates())
			}
		})
	}
}

// TestCarriedIdentity: a guest that asks an inbound for the model forward's address is
// carried there by the router, and the forward judges that guest, not this host: the
// source it allows gets the model, another does not (nor around it, at the model's own
// address); an inbound chained into itself keeps its first client too.
func TestCarriedIdentity(t *testing.T) {
	target := private(startTarget(t, "model\n")) // its loopback address: the forward dials it as it is
	e := newEnv(t, Settings{}, Options{})
	ln, err := e.r.ListenForward(context.Background(), Forward{Listen: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	fw := Forward{Name: "model", Listen: netaddr.AddrPort(ln.Addr()), Connect: target, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.r.ServeForward(ctx, ln, func() *Forward { return &fw })
	in := e.startInbound(Inbound{Type: InboundSOCKS5})
	cfg := &conf.Config{
		Forwards: []conf.Forward{{Name: fw.Name, Listen: fw.Listen, Connect: fw.Connect, Allow: fw.Allow}},
		Inbounds: []conf.Inbound{{Name: "test-socks5", Type: "socks5", Listen: in, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}},
	}
	if err := e.r.Apply(Settings{Decision: policy.New(cfg, policy.Env{}), IdleTimeout: time.Minute, ConnectTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	via := func(from string, hops ...netip.AddrPort) string {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: waitFor}
		c, err := d.Dial("tcp", in.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(waitFor))
		for _, h := range hops {
			if _, err := (&socks5.Client{}).Handshake(c, socks5.Addr{IP: h.Addr(), Port: h.Port()}); err != nil {
				return "refused: " + err.Error()
			}
		}
		b := make([]byte, len("model\n")) // the target answers its banner, then echoes
		n, _ := io.ReadFull(c, b)
		return string(b[:n])
	}
	if got := via("127.0.0.3", fw.Listen); got != "model\n" {
		t.Errorf("the allowed source through the inbound to the forward: %q", got)
	}
	if got := via("127.0.0.3", in, fw.Listen); got != "model\n" {
		t.Errorf("the allowed source through the inbound twice to the forward: %q", got)
	}
	for _, hops := range [][]netip.AddrPort{{fw.Listen}, {in, fw.Listen}, {target}} {
		if got := via("127.0.0.4", hops...); got == "model\n" {
			t.Errorf("a source the forward refuses, through %v: got the model", hops)
		}
	}
	if n := e.r.book.Count(refusal.ForwardSource); n < 2 {
		t.Errorf("forward-source refusals: %d, want 2", n)
	}
}
