package router

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/accept"
	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/rules/policy"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upload"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

const testUploadLimit = 1 << 20

// sendOver writes n bytes to app (the flow's client side) on a goroutine, reading what the
// peer receives on this one; it returns the bytes the peer received and the writer's error.
func sendOver(t *testing.T, app, peer net.Conn, n int) (received int64, writeErr error) {
	t.Helper()
	app.SetDeadline(time.Now().Add(waitFor))
	peer.SetDeadline(time.Now().Add(waitFor))
	errc := make(chan error, 1)
	go func() { errc <- uploadUntilError(app, n) }()
	received, _ = io.Copy(io.Discard, peer)
	return received, <-errc
}

// uploadUntilError writes n bytes "x" to c in pieces, until the first error, which it
// returns: what the kernel's buffers take before the reset comes back is not an upload
// that went through.
func uploadUntilError(c net.Conn, n int) error {
	piece := bytes.Repeat([]byte("x"), 256<<10)
	for sent := 0; sent < n; sent += len(piece) {
		if _, err := c.Write(piece); err != nil {
			return err
		}
	}
	return nil
}

// TestRelayCutsAnUploadOverBudget: each relay (splice, the copy, and one asked to use the
// sockmap, which a budgeted flow does not use) counts the bytes up, and the flow whose
// guest passes its budget is cut mid-stream, before the chunk that passes it is sent on;
// the client sees a reset.
func TestRelayCutsAnUploadOverBudget(t *testing.T) {
	run := func(t *testing.T, rl *relay, copyPath bool) {
		b := upload.New(upload.Limits{PerDomain: testUploadLimit, Window: time.Minute}, nil, nil)
		app, a := tcpPair(t)
		bc, peer := tcpPair(t)
		ch := make(chan result, 1)
		m := &meter{upload: b.Flow("g", "example.com")}
		if copyPath {
			rl.copyRelay(a, bc, m, func(r result) { ch <- r })
		} else {
			rl.start(a, bc, m, func(r result) { ch <- r })
		}
		if m.kernel.Load() != nil {
			t.Fatal("a flow under an upload budget went into the sockmap")
		}
		got, werr := sendOver(t, app, peer, 64*testUploadLimit)
		res := waitResult(t, ch, waitFor)
		if res.err != errOverUpload {
			t.Fatalf("flow ended with %v, want %v", res.err, errOverUpload)
		}
		if got > testUploadLimit || got == 0 {
			t.Fatalf("the peer received %d bytes, want some and at most the budget %d", got, testUploadLimit)
		}
		if werr == nil {
			t.Fatal("the client's upload of 64 times the budget went through")
		}
		if !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(werr, syscall.EPIPE) {
			t.Errorf("the client's write failed with %v, want a reset", werr)
		}
		if !b.Refuses("g", "example.com") {
			t.Error("the budget does not refuse the guest's next flow")
		}
	}
	t.Run("splice", func(t *testing.T) { run(t, newTestRelay(t, time.Minute), false) })
	t.Run("copy", func(t *testing.T) { run(t, newTestRelay(t, time.Minute), true) })
	t.Run("sockmap", func(t *testing.T) { run(t, kernelRelay(t, time.Minute), false) })
}

// TestUploadBudget: through the router, on both set-up paths, a guest's upload past its
// budget to a domain is cut mid-stream and its next flow to the domain (another name under
// it) refused; the same guest to another domain and another guest to the domain pass; the
// refusals are counted as budget and the counts shown.
func TestUploadBudget(t *testing.T) {
	for _, goroutine := range []bool{false, true} {
		name := "loop"
		if goroutine {
			name = "goroutine"
		}
		t.Run(name, func(t *testing.T) { testUploadBudget(t, goroutine) })
	}
}

func testUploadBudget(t *testing.T, goroutineSetup bool) {
	sink, received := startSink(t)
	upA, wwwA, upB := netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("198.18.0.8"), netip.MustParseAddr("198.18.0.9")
	p := startProxy(t, map[string]netip.Addr{"up.a.test": sink.Addr(), "www.a.test": sink.Addr(), "up.b.test": sink.Addr()}, nil)
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{upA: "up.a.test", wwwA: "www.a.test", upB: "up.b.test"}}
	pol := Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}},
		Sockmap:   true, // a budgeted flow is spliced all the same
	}
	b := upload.New(upload.Limits{PerDomain: testUploadLimit, Window: time.Minute}, nil, nil)
	e := newEnv(t, pol, Options{Names: names, Uploads: b, GoroutineSetup: goroutineSetup})
	guest1, guest2 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")

	// An upload of 64 times the budget is cut, having sent at most the budget.
	c := dialGuest(t, e, guest1, netip.AddrPortFrom(upA, sink.Port()))
	if err := uploadUntilError(c, 64*testUploadLimit); err == nil {
		t.Fatal("an upload of 64 times the budget went through")
	}
	waitStatus(t, e, "the cut flow to end", func(st Stats) bool { return st.Totals.Live == 0 })
	if got := received.n['x'].Load(); got > testUploadLimit {
		t.Fatalf("the destination received %d bytes, past the budget %d", got, testUploadLimit)
	}
	e.waitLog("budget of bytes")

	// The guest's next flow to the domain is refused, and nothing asked of the proxy.
	asked := len(p.Asked())
	c = dialGuest(t, e, guest1, netip.AddrPortFrom(wwwA, sink.Port()))
	wantReset(t, c)
	if n := len(p.Asked()); n != asked {
		t.Errorf("the proxy was asked %d times more for a refused flow", n-asked)
	}

	// The guest to another domain, and another guest to the domain, pass.
	for _, tc := range []struct {
		src   netip.Addr
		dst   netip.Addr
		value byte
	}{{guest1, upB, 'y'}, {guest2, upA, 'z'}} {
		c := dialGuest(t, e, tc.src, netip.AddrPortFrom(tc.dst, sink.Port()))
		if _, err := c.Write(bytes.Repeat([]byte{tc.value}, testUploadLimit/2)); err != nil {
			t.Fatalf("%v to %v: %v", tc.src, tc.dst, err)
		}
		c.CloseWrite()
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("%v to %v: %v", tc.src, tc.dst, err)
		}
		wait.For(t, "the upload to arrive whole", waitFor, func() bool { return received.n[tc.value].Load() == testUploadLimit/2 })
	}
	if got := received.n['x'].Load(); got > testUploadLimit {
		t.Fatalf("the destination received %d bytes of the cut upload, past the budget %d", got, testUploadLimit)
	}
	if n := e.r.book.Count(refusal.Budget); n != 2 {
		t.Errorf("budget refusals = %d, want 2 (the cut flow and the refused one)", n)
	}
	uses := e.r.UploadBudgets(0)
	if len(uses) != 3 || uses[0].Guest != "host 127.0.0.2" || uses[0].Domain != "a.test" || !uses[0].Over ||
		uses[1].Domain != "b.test" || uses[1].Used != testUploadLimit/2 || uses[2].Guest != "host 127.0.0.3" || uses[2].Over {
		t.Errorf("uses = %+v", uses)
	}
}

// sink counts the bytes a sink server received, by their value: each flow of a test sends
// bytes of a value of its own, so that a flow's count never depends on when another
// flow's connection ends.
type sink struct{ n [256]atomic.Int64 }

// startSink runs a server that reads and drops what it is sent, counting it by value, and
// closes its side at EOF; it returns the server's public alias.
func startSink(t *testing.T) (netip.AddrPort, *sink) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := new(sink)
	go accept.Loop(context.Background(), ln, ln.Accept, nil, func(c net.Conn) { go s.drain(c) })
	t.Cleanup(func() { ln.Close() })
	return public(ln.Addr().(*net.TCPAddr).AddrPort()), s
}

// drain reads c to its end (or waitFor), counting the bytes, and closes it.
func (s *sink) drain(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		for _, b := range buf[:n] {
			s.n[b].Add(1)
		}
		if err != nil {
			return
		}
	}
}

// dialGuest connects "through capture" from src (a loopback address) to dst.
func dialGuest(t *testing.T, e *env, src netip.Addr, dst netip.AddrPort) *net.TCPConn {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*net.TCPConn)
	e.orig.set(netaddr.AddrPort(c.LocalAddr()), dst)
	c.SetDeadline(time.Now().Add(waitFor))
	t.Cleanup(func() { c.Close() })
	return c
}

// waitStatus waits (bounded) until the router's status satisfies ok.
func waitStatus(t *testing.T, e *env, what string, ok func(Stats) bool) {
	t.Helper()
	wait.For(t, what, waitFor, func() bool { return ok(e.r.Status()) })
}

// TestBrokeredUploadBudget: a brokered destination's flow (the router copies its requests
// itself) counts its bytes up too: a request body past the budget is cut, the client reset,
// and the guest's next flow to the domain refused.
func TestBrokeredUploadBudget(t *testing.T) {
	const ph = "router-placeholder-api-7d7d7d"
	api := startAPI(t)
	port := api.addr.Port()
	apiFake := netip.MustParseAddr("198.18.0.7")
	dest := "api.lab.test:" + strconv.Itoa(int(port))
	creds := broker.New([]broker.Credential{{Name: "api-key", Placeholder: ph, Value: secret.NewPassword("REAL-api-value-8e8e"), Destination: dest, Header: "Authorization"}})
	cfg := &conf.Config{Rules: []rules.Rule{hostRule("labs", rules.Direct, "", "*.lab.test")},
		Capture:     conf.Capture{VMNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		DNS:         conf.DNS{Mode: conf.DNSFakeIP, Pool: netip.MustParsePrefix("198.18.0.0/15")},
		Credentials: []conf.Credential{{Name: "api-key", Placeholder: ph, Destination: dest}}}
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{apiFake: "api.lab.test"},
		Resolved: map[string][]netip.Addr{"api.lab.test": {api.addr.Addr()}}}
	b := upload.New(upload.Limits{PerDomain: 64 << 10, Window: time.Minute}, nil, nil)
	e := newEnv(t, Settings{Decision: policy.New(cfg, policy.Env{}), Credentials: creds}, Options{Names: names, Uploads: b})

	c := e.dial(netip.AddrPortFrom(apiFake, port))
	body := bytes.Repeat([]byte("x"), 1<<20)
	head := "POST /v1/upload HTTP/1.1\r\nHost: " + dest + "\r\nAuthorization: Bearer " + ph + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	go func() {
		io.WriteString(c, head)
		c.Write(body)
	}()
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		t.Fatalf("a request body of 16 times the budget was answered: %s", resp.Status)
	}
	wait.For(t, "the cut counted", waitFor, func() bool { return e.r.book.Count(refusal.Budget) == 1 })
	c = e.dial(netip.AddrPortFrom(apiFake, port))
	wantReset(t, c)
	wait.For(t, "the refusal counted", waitFor, func() bool { return e.r.book.Count(refusal.Budget) == 2 })
	if u := b.Uses(0); len(u) != 1 || u[0].Domain != "lab.test" || !u[0].Over {
		t.Errorf("uses = %+v", u)
	}
}
