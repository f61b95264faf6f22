package router

import (
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/rules/refusal"
)

// askEnv is a router whose rule asks about the alias (every target), with a desk and a
// proxy that carries approved flows.
func askEnv(t *testing.T, timeout time.Duration, opts Options) (*env, *ask.Desk) {
	t.Helper()
	p := startProxy(t, nil, nil)
	desk := ask.New(ask.Options{MaxPerSource: 16, MaxTotal: 64})
	opts.Asks = desk
	pol := Settings{Decision: mustRules(t, hostRule("asked", rules.Ask, "exit", alias.String())), AskTimeout: timeout,
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}}}
	return newEnv(t, pol, opts), desk
}

// pendingPrompt waits for the one prompt on desk.
func pendingPrompt(t *testing.T, desk *ask.Desk, held int) ask.Prompt {
	t.Helper()
	var p ask.Prompt
	if !wait.Poll(waitFor, func() bool {
		ps := desk.Pending()
		if len(ps) == 1 && ps[0].Held == held {
			p = ps[0]
			return true
		}
		return false
	}) {
		t.Fatalf("pending = %+v, want one prompt holding %d", desk.Pending(), held)
	}
	return p
}

// TestAskAnswers: a held flow waits with nothing dialled; an approval (once, run, always)
// carries it through the proxy, a denial or the timeout resets it at once, counted as
// ask-denied; "run" approves the next flow without asking.
func TestAskAnswers(t *testing.T) {
	for _, c := range []struct {
		answer ask.Answer
		pass   bool
	}{{ask.Once, true}, {ask.Run, true}, {ask.Always, true}, {ask.Deny, false}, {ask.Timeout, false}} {
		t.Run(c.answer.String(), func(t *testing.T) {
			timeout := waitFor
			if c.answer == ask.Timeout {
				timeout = 200 * time.Millisecond
			}
			e, desk := askEnv(t, timeout, Options{})
			dst := startTarget(t, "hello")
			conn := e.dial(dst)
			p := pendingPrompt(t, desk, 1)
			if p.Host != dst.Addr().String() || p.Port != dst.Port() || p.Rule != "asked" || p.Proxy != "exit" {
				t.Errorf("prompt = %+v", p)
			}
			e.marked.mu.Lock()
			opened := e.marked.n
			e.marked.mu.Unlock()
			if opened != 0 {
				t.Errorf("%d sockets opened while the flow was held, want none", opened)
			}
			start := time.Now()
			if c.answer != ask.Timeout {
				if _, err := desk.Answer(p.ID, c.answer, "test"); err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]byte, 5)
			_, err := conn.Read(buf)
			switch {
			case c.pass && (err != nil || string(buf) != "hello"):
				t.Fatalf("approved flow read %q, %v", buf, err)
			case !c.pass && err == nil:
				t.Fatalf("refused flow read %q", buf)
			case c.answer == ask.Deny && time.Since(start) > time.Second:
				t.Errorf("a denied flow ended %v after the answer", time.Since(start))
			}
			conn.Close()
			e.waitLog("msg=flow ")
			if !strings.Contains(e.logs.String(), "asked="+c.answer.String()) {
				t.Errorf("the flow record does not say asked=%s:\n%s", c.answer, e.logs.String())
			}
			if !c.pass {
				got := e.r.Refusals()
				if len(got) != 1 || got[0].Reason != refusal.AskDenied {
					t.Errorf("refusals = %+v, want one ask-denied", got)
				}
				return
			}
			if c.answer == ask.Run || c.answer == ask.Always {
				again := e.dial(dst)
				if got := readN(t, again, 5); got != "hello" {
					t.Errorf("the next flow read %q", got)
				}
				if n := len(desk.Pending()); n != 0 {
					t.Errorf("the next flow was asked about again (%d prompts)", n)
				}
			}
		})
	}
}

// TestAskNoDesk: without a desk an ask is refused at once.
func TestAskNoDesk(t *testing.T) {
	p := startProxy(t, nil, nil)
	pol := Settings{Decision: mustRules(t, hostRule("asked", rules.Ask, "exit", alias.String())),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}}}
	e := newEnv(t, pol, Options{})
	c := e.dial(startTarget(t, "hello"))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > time.Second {
		t.Errorf("read: %v after %v, want a reset at once", err, time.Since(start))
	}
}

// TestAskSharedCases: the relay decides the ask cases as the policy does: a case the
// policy asks about is held (one prompt, under the case's rule) and a denial refuses it;
// the others are decided without a prompt.
func TestAskSharedCases(t *testing.T) {
	cfg, err := conf.Parse("ask.toml", []byte(policytest.AskConfig), conf.Options{SkipSecrets: true, ReadFile: noFile})
	if err != nil {
		t.Fatal(err)
	}
	dec := policy.New(cfg, policytest.Env())
	p := startProxy(t, nil, nil)
	for _, c := range policytest.AskCases(false) {
		t.Run(c.Name, func(t *testing.T) {
			fl := c.Flow
			desk := ask.New(ask.Options{})
			opts := Options{Asks: desk,
				Original: func(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
					return netip.AddrPortFrom(fl.Src, 40000), netip.AddrPortFrom(fl.Dst, fl.Port), nil
				},
				Names: namesOf(fl),
			}
			pol := Settings{Decision: dec, Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}}}
			e := newEnv(t, pol, opts)
			if c.Action != rules.Ask {
				e.wantDecided(c.Action, c.Rule)
				return
			}
			conn, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			pr := pendingPrompt(t, desk, 1)
			if pr.Rule != c.Rule || pr.Proxy != c.Proxy {
				t.Errorf("prompt %+v, want rule %q proxy %q", pr, c.Rule, c.Proxy)
			}
			desk.Answer(pr.ID, ask.Deny, "test")
			e.waitLog("msg=flow ")
			if !strings.Contains(e.logs.String(), "asked=deny") {
				t.Errorf("no denial in the log:\n%s", e.logs.String())
			}
		})
	}
}

// TestAskBounds: thousands of held flows from one source (to as many destinations) take
// its share and are refused past it, and another source's allowed flows still go through,
// none waiting behind them: a flow stuck behind the held ones would wait out the ask's
// minute, and each read's deadline (waitFor) fails it long before. How long they take is
// logged, not judged: a loaded machine makes them slower, not wrong (a 1 s bound failed
// under load).
func TestAskBounds(t *testing.T) {
	const greedy = 4000 // two descriptors each in this process (client and accepted ends)
	greedySrc := netip.MustParseAddr("10.0.2.15")
	otherSrc := netip.MustParseAddr("10.0.2.16")
	var mu sync.Mutex
	srcOf := map[netip.AddrPort]netip.Addr{}
	orig := &origTable{m: map[netip.AddrPort]netip.AddrPort{}}
	opts := Options{Descriptors: 3 * greedy,
		Original: func(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			dst, err := orig.lookup(c)
			mu.Lock()
			src := srcOf[netaddr.AddrPort(c.RemoteAddr())]
			mu.Unlock()
			return netip.AddrPortFrom(src, 40000), dst, err
		}}
	px := startProxy(t, nil, nil)
	desk := ask.New(ask.Options{MaxPerSource: 64, MaxTotal: 1024})
	opts.Asks = desk
	open := hostRule("open", rules.Proxy, "exit", alias.String())
	open.Sources = []rules.IPRange{rules.RangeOfPrefix(netip.PrefixFrom(otherSrc, 32))}
	asked := rules.Rule{Name: "asked", Action: rules.Ask, Proxy: "exit"}
	pol := Settings{Decision: mustRules(t, open, asked), AskTimeout: time.Minute,
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: px.Addr.Port()}}}}
	e := newEnv(t, pol, opts)
	resets := 0
	var lastErr error
	dialFrom := func(src netip.Addr, dst netip.AddrPort) *net.TCPConn {
		// Each source dials from its own loopback address: a port of a greedy connection
		// the router refused is free again, and the other source's dial from it would meet
		// that connection's entries in the tables before its own are set.
		var local *net.TCPAddr
		if src == otherSrc {
			local = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
		}
		c, err := net.DialTCP("tcp", local, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
		if err != nil {
			resets++ // refused before the dial returned
			lastErr = err
			return nil
		}
		mu.Lock()
		srcOf[netaddr.AddrPort(c.LocalAddr())] = src
		mu.Unlock()
		orig.set(netaddr.AddrPort(c.LocalAddr()), dst)
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := range greedy {
		dialFrom(greedySrc, netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, byte(113 + i/60000), byte(i % 250)}), uint16(1000+i)))
	}
	target := startTarget(t, "hello")
	start := time.Now()
	var worst time.Duration
	for range 20 {
		t0 := time.Now()
		c := dialFrom(otherSrc, target)
		if c == nil {
			t.Fatalf("the other source's flow was refused: %v", lastErr)
		}
		c.SetDeadline(time.Now().Add(waitFor))
		if got := readN(t, c, 5); got != "hello" {
			t.Fatalf("the other source's flow read %q", got)
		}
		worst = max(worst, time.Since(t0))
		c.Close()
	}
	held := 0
	for _, p := range desk.Pending() {
		held += p.Held
	}
	t.Logf("%d flows from one source (%d reset before the dial returned): %d held (%d prompts); 20 flows of another source in %v, the slowest %v",
		greedy, resets, held, len(desk.Pending()), time.Since(start), worst)
	if held > 64 {
		t.Errorf("%d flows held for one source, want at most 64", held)
	}
}

// namesOf is the DNS side of a case's flow: its name behind its fake IP.
func namesOf(fl policy.Flow) *dnstest.Names {
	n := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{}}
	if fl.Host != "" {
		n.Names[fl.Dst] = fl.Host
	}
	return n
}

// noFile reads no file: a config's approved rules file is missing.
func noFile(name string) ([]byte, error) { return nil, fs.ErrNotExist }

// TestAskUDP: UDP is never held: a datagram an ask rule decides is dropped, counted as
// ask-denied, and nothing is associated.
func TestAskUDP(t *testing.T) {
	e := newUDPEnv(t, nil, nil, rules.Rule{Name: "asked", Action: rules.Ask, Proxy: "exit"})
	e.send(guest, echo, "ping")
	if !wait.Poll(waitFor, func() bool {
		got := e.r.Refusals()
		return len(got) == 1 && got[0].Reason == refusal.AskDenied
	}) {
		t.Fatalf("refusals = %+v, want one ask-denied", e.r.Refusals())
	}
	e.mu.Lock()
	n := len(e.assoc)
	e.mu.Unlock()
	if n != 0 {
		t.Errorf("%d associations opened for an ask", n)
	}
}

// TestAskAudit: the flow log for audits records the answer of a held flow.
func TestAskAudit(t *testing.T) {
	dir := t.TempDir()
	a := auditlog.New(auditlog.Options{})
	if err := a.Open(filepath.Join(dir, "flows.jsonl")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	e, desk := askEnv(t, waitFor, Options{Audit: a})
	c := e.dial(startTarget(t, "hello"))
	p := pendingPrompt(t, desk, 1)
	desk.Answer(p.ID, ask.Deny, "test")
	c.Read(make([]byte, 1))
	var b []byte
	if !wait.Poll(waitFor, func() bool {
		b, _ = os.ReadFile(filepath.Join(dir, "flows.jsonl"))
		return strings.Contains(string(b), `"asked":"deny"`) && strings.Contains(string(b), `"reason":"ask-denied"`)
	}) {
		t.Fatalf("flow log:\n%s", b)
	}
}
