package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// The event loops' set-up (loop_setup_linux.go), driven from outside: a scripted SOCKS5 proxy on
// loopback answers in pieces, wrongly, late or not at all, and the tests judge by what the
// client gets, the router's log, its refusals and the upstream's health.

// wantLoopFlows checks that the loops set n flows up so far (none when the suite runs with
// ROUTER_TEST_SLOW_SETUP=1: the same tests then judge the goroutine path).
func wantLoopFlows(t *testing.T, r *Router, n uint64) {
	t.Helper()
	if slowSetup {
		n = 0
	}
	if got := r.loops.setups.Load(); got != n {
		t.Errorf("the loops set %d flows up, want %d", got, n)
	}
}

// script is one proxy's part in a conversation: what it answers, in pieces with a pause
// between them, then whether it becomes the destination (a banner, then an echo) or closes.
type script struct {
	pieces []string
	pause  time.Duration
	target string // "" : close after the pieces (unless echo)
	echo   bool   // after the pieces (and the target's banner), echo what comes
	silent bool   // answer nothing, hold the connection
}

// scriptedProxy accepts connections on loopback and plays sc on each; it records the first
// read of each connection (what the router sent in one segment), everything it read, and
// the most connections it held at once before it sent their last answer (maxShaking).
type scriptedProxy struct {
	Addr       netip.AddrPort
	mu         sync.Mutex
	first      []string
	all        []string
	shaking    int
	maxShaking int
}

func startScripted(t *testing.T, sc script) *scriptedProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptedProxy{Addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.play(c, sc) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return p
}

func (p *scriptedProxy) play(c net.Conn, sc script) {
	defer c.Close()
	p.mu.Lock()
	p.shaking++
	p.maxShaking = max(p.maxShaking, p.shaking)
	p.mu.Unlock()
	shaken := sync.OnceFunc(func() {
		p.mu.Lock()
		p.shaking--
		p.mu.Unlock()
	})
	defer shaken()
	c.SetDeadline(time.Now().Add(waitFor))
	var read strings.Builder
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	read.Write(buf[:n])
	p.mu.Lock()
	p.first = append(p.first, string(buf[:n]))
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.all = append(p.all, read.String())
		p.mu.Unlock()
	}()
	if err != nil {
		return
	}
	if sc.silent {
		io.Copy(io.Discard, c)
		return
	}
	for i, piece := range sc.pieces {
		// In lock step the router sends its next message after an answer: take it.
		c.SetReadDeadline(time.Now().Add(sc.pause))
		if n, _ := c.Read(buf); n > 0 {
			read.Write(buf[:n])
		}
		c.SetDeadline(time.Now().Add(waitFor))
		if i == len(sc.pieces)-1 {
			// Before the last answer, which the router may read (and then connect the next
			// flow to the destination) before this goroutine runs again: counted after it,
			// a handshake would overlap the next one's.
			shaken()
		}
		if _, err := io.WriteString(c, piece); err != nil {
			return
		}
	}
	shaken()
	if sc.target == "" && !sc.echo {
		return
	}
	io.WriteString(c, sc.target)
	io.Copy(c, c)
}

func (p *scriptedProxy) reads() (first, all []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.first...), append([]string(nil), p.all...)
}

// bytesOf splits s into one-byte pieces.
func bytesOf(s string) []string {
	var out []string
	for i := range len(s) {
		out = append(out, s[i:i+1])
	}
	return out
}

const (
	methodNoAuth = "\x05\x00"
	methodPass   = "\x05\x02"
	authOK       = "\x01\x00"
	replyOK      = "\x05\x00\x00\x01\xcb\x00\x71\x05\x9c\x40"
	replyRefused = "\x05\x05\x00\x01\x00\x00\x00\x00\x00\x00"
)

// proxied is a policy that sends everything through proxy "exit" at p.
func proxied(p netip.AddrPort, pipeline bool, user, pass string) Settings {
	return Settings{
		Decision: decision([]rules.Rule{{Name: "all", Action: rules.Proxy, Proxy: "exit"}}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Port(),
			Pipeline: pipeline, Username: user, Password: pass}}},
	}
}

// TestLoopSetsUpFlows: a direct flow and flows through go-socks5 (with credentials,
// pipelined or not) are set up by the loops, relayed both ways, shown live and logged.
func TestLoopSetsUpFlows(t *testing.T) {
	target := startTarget(t, "hello\n")
	gs := startProxy(t, nil, map[string]string{"agent": "pw-42"})
	for _, tc := range []struct {
		name string
		pol  Settings
	}{
		{"direct", Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}},
		{"socks5-pipelined", proxied(gs.Addr, true, "agent", "pw-42")},
		{"socks5-lockstep", proxied(gs.Addr, false, "agent", "pw-42")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.pol, Options{})
			for i := range 3 {
				c := e.dial(target)
				if got := readN(t, c, 6); got != "hello\n" {
					t.Fatalf("flow %d: banner %q", i, got)
				}
				io.WriteString(c, "ping")
				if got := readN(t, c, 4); got != "ping" {
					t.Fatalf("flow %d: echo %q", i, got)
				}
				if st := e.r.Status(); st.Totals.Live < 1 {
					t.Errorf("flow %d: %d flows live while one relays", i, st.Totals.Live)
				}
				c.Close()
			}
			wantLoopFlows(t, e.r, 3)
			e.waitLog("msg=\"flow open\"")
			e.waitLog("msg=flow ")
			if st := e.r.Status(); st.Rules[0].Hits != 3 {
				t.Errorf("rule counted %d flows, want 3", st.Rules[0].Hits)
			}
		})
	}
}

// earlyOriginal is an OriginalFD that answers only once the client's first bytes are in its
// socket, so that they are there when the loop sends the request: a test of what goes out in
// one write.
func earlyOriginal(dst netip.AddrPort) func(int, netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
	return func(fd int, peer netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
		var b [1]byte
		_ = wait.Poll(waitFor, func() bool { // not there in time: the test's check of the write says so
			n, _, _ := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			return n > 0
		})
		return peer, dst, nil
	}
}

// TestLoopAnswersInPieces: the proxy's answers come a byte at a time, with pauses; the flow
// is set up all the same, pipelined or in lock step, with credentials or not, and the
// request carries the client's first bytes in the same segment when pipelined.
func TestLoopAnswersInPieces(t *testing.T) {
	dst := netip.MustParseAddrPort("203.0.113.7:443")
	for _, tc := range []struct {
		name     string
		pipeline bool
		creds    bool
	}{
		{"pipelined", true, false},
		{"pipelined-creds", true, true},
		{"lockstep", false, false},
		{"lockstep-creds", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answers := methodNoAuth + replyOK
			user, pass := "", ""
			if tc.creds {
				answers, user, pass = methodPass+authOK+replyOK, "agent", "pw-42"
			}
			p := startScripted(t, script{pieces: bytesOf(answers), pause: 2 * time.Millisecond, target: "banner\n"})
			e := newEnv(t, proxied(p.Addr, tc.pipeline, user, pass), Options{OriginalFD: earlyOriginal(dst)})
			c := e.dial(dst)
			io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
			if got := readN(t, c, 7); got != "banner\n" {
				t.Fatalf("banner %q", got)
			}
			// Pipelined, the first bytes went with the request (read by the script as
			// such); in lock step the relay sends them after the reply, and they echo.
			echo := "ping"
			if !tc.pipeline {
				echo = "GET / HTTP/1.1\r\n\r\n" + echo
			}
			io.WriteString(c, "ping")
			if got := readN(t, c, len(echo)); got != echo {
				t.Fatalf("echo %q, want %q", got, echo)
			}
			c.Close()
			first, _ := p.reads()
			req, _ := socks5.AppendRequest(nil, socks5.CmdConnect, socks5.Addr{IP: dst.Addr(), Port: dst.Port()})
			want := "\x05\x01\x00"
			if tc.creds {
				want = "\x05\x01\x02"
			}
			if tc.pipeline {
				if tc.creds {
					want += "\x01\x05agent\x05pw-42"
				}
				want += string(req) + "GET / HTTP/1.1\r\n\r\n"
			}
			if len(first) != 1 || first[0] != want {
				t.Errorf("the proxy's first read\n%q\nwant\n%q", first, want)
			}
			wantLoopFlows(t, e.r, 1)
		})
	}
}

// TestLoopShortReplyLate: the proxy's reply binds a two-letter name (9 bytes, shorter than
// the answers the loop waits for at once), its last byte comes late, after the rest, and the
// destination then waits for the client: the loop wakes for that byte all the same.
func TestLoopShortReplyLate(t *testing.T) {
	reply := "\x05\x00\x00\x03\x02ab\x00\x50"
	p := startScripted(t, script{pieces: []string{methodNoAuth + reply[:8], reply[8:]}, pause: 50 * time.Millisecond, echo: true})
	e := newEnv(t, proxied(p.Addr, true, "", ""), Options{})
	c := e.dial(netip.MustParseAddrPort("203.0.113.7:443"))
	// The client speaks once the flow is relayed: the upstream is up once the whole reply
	// was read, its late byte included, which only a loop that woke for it reads.
	waitUntil(t, func() bool { return e.r.UpstreamStatus()[0].State == upstream.Up })
	io.WriteString(c, "ping")
	if got := readN(t, c, 4); got != "ping" {
		t.Fatalf("echo %q", got)
	}
	wantLoopFlows(t, e.r, 1)
}

// TestLoopHandshakeFailures: every way a proxy can fail the handshake resets the client
// (never a direct connection), is logged, counted among the refusals as the goroutine path
// counts it, and feeds the upstream's health.
func TestLoopHandshakeFailures(t *testing.T) {
	closed := closedAddr(t)
	for _, tc := range []struct {
		name     string
		sc       *script // nil: nothing listens
		creds    bool
		wantLog  string
		wantDown bool // the upstream is down afterwards; otherwise up (it answered)
	}{
		{"refused", &script{pieces: []string{methodNoAuth, replyRefused}}, false, "connection refused (reply 0x05)", false},
		{"refused-in-pieces", &script{pieces: bytesOf(methodNoAuth + replyRefused), pause: time.Millisecond}, false, "connection refused (reply 0x05)", false},
		{"auth-refused", &script{pieces: []string{methodPass, "\x01\x01"}}, true, "credentials rejected", true},
		{"no-acceptable-method", &script{pieces: []string{"\x05\xff"}}, true, "no acceptable authentication methods", true},
		{"closes-after-method", &script{pieces: []string{methodNoAuth}}, false, "read reply: EOF", true},
		{"closes-mid-reply", &script{pieces: []string{methodNoAuth, replyOK[:4]}}, false, "read reply: unexpected EOF", true},
		{"closes-at-once", &script{}, false, "read method selection: EOF", true},
		{"not-socks", &script{pieces: []string{"HTTP/1.1 400 Bad Request\r\n\r\n"}}, false, "server version 0x48", true},
		{"silent", &script{silent: true}, false, "i/o timeout", true},
		{"nothing-listens", nil, false, "connection refused", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := closed
			if tc.sc != nil {
				addr = startScripted(t, *tc.sc).Addr
			}
			user, pass := "", ""
			if tc.creds {
				user, pass = "agent", "pw-42"
			}
			pol := proxied(addr, true, user, pass)
			pol.ConnectTimeout = 300 * time.Millisecond
			e := newEnv(t, pol, Options{})
			start := time.Now()
			wantReset(t, e.dial(netip.MustParseAddrPort("203.0.113.7:443")))
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the reset came after %v", took)
			}
			e.waitLog(tc.wantLog)
			e.waitLog("msg=flow ")
			down := 0
			for _, st := range e.r.Refusals() {
				if st.Reason == refusal.UpstreamDown {
					down += int(st.Count)
				}
			}
			if (down > 0) != tc.wantDown {
				t.Errorf("refusals for the upstream down: %d, want any: %v", down, tc.wantDown)
			}
			ups := e.r.UpstreamStatus()
			if len(ups) != 1 || (ups[0].State == upstream.Down) != tc.wantDown {
				t.Errorf("upstream %+v, want down: %v", ups, tc.wantDown)
			}
			wantLoopFlows(t, e.r, 1)
			if strings.Contains(e.logs.String(), "pw-42") {
				t.Errorf("password in the log:\n%s", e.logs.String())
			}
		})
	}
}

// TestLoopCloseEndsSetups: flows being set up when the router closes end with a reset, and
// Wait returns: the loops end them at once (their records say the router closed, and the
// upstream's health counts nothing); the goroutine path at their connect timeout.
func TestLoopCloseEndsSetups(t *testing.T) {
	p := startScripted(t, script{silent: true})
	pol := proxied(p.Addr, true, "", "")
	pol.ConnectTimeout = time.Second
	e := newEnv(t, pol, Options{})
	var cs []*net.TCPConn
	for range 5 {
		cs = append(cs, e.dial(netip.MustParseAddrPort("203.0.113.7:443")))
	}
	waitUntil(t, func() bool { used, _, _ := e.r.adm.setups.stats(); return used == 5 })
	start := time.Now()
	e.r.Close()
	for _, c := range cs {
		wantReset(t, c)
	}
	if took := time.Since(start); !slowSetup && took > 500*time.Millisecond {
		t.Errorf("the resets came %v after Close", took)
	}
	waitReturns(t, "Wait after Close", e.r.Wait)
	wantLoopFlows(t, e.r, 5)
	if slowSetup {
		return
	}
	if ups := e.r.UpstreamStatus(); ups[0].State != upstream.Unknown {
		t.Errorf("closing counted against the upstream: %+v", ups[0])
	}
	e.waitLog("router closed")
}

// TestLoopServeEnds: Serve returns when its listener is closed, and when its context ends
// while a flow is being set up (which then ends like a cancelled one).
func TestLoopServeEnds(t *testing.T) {
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}, Options{})
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.r.Serve(context.Background(), ln) }()
	// Serve is under way once it carried a flow from ln.
	first, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	e.orig.set(netaddr.AddrPort(first.LocalAddr()), startTarget(t, "hello\n"))
	first.SetDeadline(time.Now().Add(waitFor))
	if got := readN(t, first, 6); got != "hello\n" {
		t.Fatalf("a flow through Serve: %q", got)
	}
	ln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after its listener was closed")
	}

	p := startScripted(t, script{silent: true})
	pol := proxied(p.Addr, true, "", "")
	pol.ConnectTimeout, pol.IdleTimeout = time.Minute, time.Minute
	if err := e.r.Apply(pol); err != nil {
		t.Fatal(err)
	}
	ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- e.r.Serve(ctx, ln) }()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e.orig.set(netaddr.AddrPort(c.LocalAddr()), netip.MustParseAddrPort("203.0.113.7:443"))
	waitUntil(t, func() bool { used, _, _ := e.r.adm.setups.stats(); return used == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after its context ended")
	}
	wantReset(t, c)
	e.waitLog("context canceled")
}

// TestLoopHandsOffSlowSteps: flows that need a slow step (their owner, a failover list) are
// set up on the goroutine path, with the same outcome.
func TestLoopHandsOffSlowSteps(t *testing.T) {
	target := startTarget(t, "hello\n")
	gs := startProxy(t, nil, nil)
	pol := proxied(gs.Addr, true, "", "")
	pol.Upstreams = append(pol.Upstreams, UpstreamConfig{Config: upstream.Config{Name: "backup", Host: "127.0.0.1", Port: gs.Addr.Port()}})
	pol.Decision = decision([]rules.Rule{{Name: "all", Action: rules.Proxy, Proxy: "exit,backup"}})
	e := newEnv(t, pol, Options{})
	c := e.dial(target)
	if got := readN(t, c, 6); got != "hello\n" {
		t.Fatalf("through a failover list: %q", got)
	}
	wantLoopFlows(t, e.r, 0)
}

// TestLoopBurstToOneDestination: more flows at once than the per-destination cap to one
// destination whose proxy answers late (slower than quickSetup: the destination does not
// count as answering) are set up perDestination at a time and every one gets through: the
// loop hands those beyond the cap to the goroutine path, which waits for the destination's
// turn, rather than resetting them or blocking the loop.
func TestLoopBurstToOneDestination(t *testing.T) {
	const flows = perDestination + 16
	dst := netip.MustParseAddrPort("203.0.113.8:443")
	p := startScripted(t, script{pieces: []string{methodNoAuth + replyOK}, pause: quickSetup + 300*time.Millisecond, target: "banner\n", echo: true})
	e := newEnv(t, proxied(p.Addr, true, "", ""), Options{})
	cs := make([]*net.TCPConn, flows)
	for i := range cs {
		cs[i] = e.dial(dst)
	}
	for i, c := range cs {
		b := make([]byte, 7)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "banner\n" {
			t.Fatalf("flow %d of %d to one destination: %q, %v; want its banner", i, flows, b, err)
		}
	}
	for i, c := range cs {
		io.WriteString(c, "ping")
		if got := readN(t, c, 4); got != "ping" {
			t.Fatalf("flow %d: echo %q", i, got)
		}
		c.Close()
	}
	p.mu.Lock()
	most := p.maxShaking
	p.mu.Unlock()
	// The proxy holds each handshake 1.3 s (ample for 48 loopback dials, also under -race
	// on a loaded machine): the burst, dialled at once, fills the cap.
	if most != perDestination {
		t.Errorf("the proxy held %d handshakes at once, want the cap (%d)", most, perDestination)
	}
	if n := e.r.book.Count(refusal.Limit); n != 0 {
		t.Errorf("%d flows refused for a limit, want none", n)
	}
	if got := e.r.loops.setups.Load(); !slowSetup && (got < perDestination/2 || got == flows) {
		t.Errorf("the loops set %d of %d flows up, want those under the cap, not those beyond", got, flows)
	}
}

// TestLoopDirectFailures: a direct flow whose destination refuses, or does not answer in
// time, gets a reset and a record of why.
func TestLoopDirectFailures(t *testing.T) {
	dst := public(closedAddr(t))
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}, Options{})
	wantReset(t, e.dial(dst))
	e.waitLog("connect direct: dial tcp ")
	e.waitLog("connection refused")
	wantLoopFlows(t, e.r, 1)
	var gotErr error
	for _, st := range e.r.Refusals() {
		if st.Reason == refusal.UpstreamDown {
			gotErr = fmt.Errorf("a direct flow counted as upstream down: %+v", st)
		}
	}
	if gotErr != nil {
		t.Error(gotErr)
	}
	_ = errors.New
}

// TestAcceptPausesOutOfDescriptors: out of descriptors, accepting pauses (logged once) and
// never ends: once descriptors are free again, the connection that waited is served.
func TestAcceptPausesOutOfDescriptors(t *testing.T) {
	target := startTarget(t, "hello\n")
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}, Options{})
	if got := readN(t, e.dial(target), 6); got != "hello\n" { // the loops and their pipes are up
		t.Fatalf("first flow: %q", got)
	}
	// The client's socket is made first; then the limit goes below what is open, so the
	// router's accept fails, and the client connects (no descriptor needed). The window is
	// a few milliseconds: until the router logs the pause.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	client := os.NewFile(uintptr(fd), "client")
	defer client.Close()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Only stdin, stdout and stderr fit under the limit: no new descriptor can be made.
	low := lim
	low.Cur = 3
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	ln := netaddr.AddrPort(e.ln.Addr())
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: ln.Addr().As4(), Port: int(ln.Port())}); err != nil {
		restore()
		t.Fatalf("connect under the low limit: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		restore()
		t.Fatal(err)
	}
	local := sa.(*unix.SockaddrInet4)
	e.orig.set(netip.AddrPortFrom(netip.AddrFrom4(local.Addr), uint16(local.Port)), target)
	e.waitLog("accept failed; pausing")
	restore()
	c, err := net.FileConn(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readBanner(t, c, "hello\n") // the flow that waited
}

// TestKeepAliveLater: a flow the loop set up gets Go's keep-alive on both sockets once it is
// keepAfter old (its sweep), not before.
func TestKeepAliveLater(t *testing.T) {
	ln := listenLoopback(t)
	var fds [2]int
	for i := range fds {
		fd, done, err := dialFD(&rawFD{}, nil, ln.Addr().(*net.TCPAddr).AddrPort())
		if err != nil {
			t.Fatal(err)
		}
		defer closeFD(fd)
		if !done { // the connect under way: writable once it is made
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			n, err := unix.Poll(pfd, int(waitFor/time.Millisecond))
			for tries := 0; err == unix.EINTR && tries < 100; tries++ { // the runtime's signals
				n, err = unix.Poll(pfd, int(waitFor/time.Millisecond))
			}
			if n != 1 || err != nil {
				t.Fatalf("connect to the listener: poll = %d, %v", n, err)
			}
		}
		fds[i] = fd
	}
	keep := func() [2]int {
		var got [2]int
		for i, fd := range fds {
			got[i], _ = rawGetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		}
		return got
	}
	f := &relayFlow{fd: fds, keep: 10 * time.Second}
	f.keepAliveDue(9 * time.Second)
	if got := keep(); got != [2]int{0, 0} {
		t.Fatalf("keep-alive %v before its time", got)
	}
	f.keepAliveDue(10 * time.Second)
	if got := keep(); got != [2]int{1, 1} || f.keep != 0 {
		t.Fatalf("keep-alive %v (keep %v) at its time, want set on both", got, f.keep)
	}
	idle, _ := rawGetsockoptInt(fds[1], unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	if idle != 30 {
		t.Errorf("upstream side: idle %d s before the first probe, want 30 (the router's dialer)", idle)
	}
}

// TestListenerItself: a connection whose original destination is the listener itself (made
// to it, not redirected) is refused.
func TestListenerItself(t *testing.T) {
	e := newEnv(t, Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}, Options{})
	wantReset(t, e.dial(netaddr.AddrPort(e.ln.Addr())))
	e.waitLog("connection made to the listener itself")
	wantLoopFlows(t, e.r, 0)
}
