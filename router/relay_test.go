package router

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// Relay tests on loopback: app ⇄ [a | relay | b] ⇄ peer.

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *net.TCPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.AcceptTCP()
		ch <- res{c, err}
	}()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { d.Close(); r.c.Close() })
	return d, r.c
}

func newTestRelay(t testing.TB, idle time.Duration) *relay {
	t.Helper()
	e := newLoopSet(nil)
	t.Cleanup(e.Close)
	return &relay{idle: idle, loops: e}
}

// eachRelay runs fn as subtests with the relay without the sockmap ("splice": splice on
// Linux, copies elsewhere) and with it ("sockmap": Linux, as root; see kernelRelay).
func eachRelay(t *testing.T, idle time.Duration, fn func(t *testing.T, rl *relay)) {
	t.Run("splice", func(t *testing.T) { fn(t, newTestRelay(t, idle)) })
	t.Run("sockmap", func(t *testing.T) { fn(t, kernelRelay(t, idle)) })
}

// relayed starts a flow on rl and returns the application's end, the peer's end and the
// flow's result.
func relayed(t *testing.T, rl *relay) (app, peer *net.TCPConn, res <-chan result) {
	t.Helper()
	app, a := tcpPair(t)
	b, peer := tcpPair(t)
	ch := make(chan result, 1)
	m := new(meter)
	rl.start(a, b, m, func(r result) { ch <- r })
	if rl.sockmap && m.kernel.Load() == nil {
		select {
		case r := <-ch:
			t.Fatalf("the flow ended at once: %+v", r)
		default:
		}
		t.Fatal("the flow is not in the sockmap")
	}
	return app, peer, ch
}

func waitResult(t *testing.T, ch <-chan result, d time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("flow did not end within %v", d)
		return result{}
	}
}

// sendRecv writes data to w and closes its write side, while reading r to EOF; it returns
// the hash of what was read.
func sendRecv(w, r *net.TCPConn, data []byte) (sent error, got [32]byte, n int64, recvErr error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, sent = w.Write(data)
		w.CloseWrite()
	}()
	h := sha256.New()
	n, recvErr = io.Copy(h, r)
	wg.Wait()
	copy(got[:], h.Sum(nil))
	return sent, got, n, recvErr
}

func TestRelayMovesBothWaysIntact(t *testing.T) {
	eachRelay(t, time.Minute, func(t *testing.T, rl *relay) {
		const flows, size = 8, 4 << 20
		var wg sync.WaitGroup
		for i := range flows {
			app, peer, res := relayed(t, rl)
			up := make([]byte, size+i)
			down := make([]byte, size/2+i)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for j := range up {
				up[j] = byte(rng.Uint32())
			}
			for j := range down {
				down[j] = byte(rng.Uint32())
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var upGot, downGot [32]byte
				var upErr, downErr error
				var inner sync.WaitGroup
				inner.Add(1)
				go func() {
					defer inner.Done()
					var err error
					err, upGot, _, upErr = sendRecv(app, peer, up)
					upErr = errors.Join(err, upErr)
				}()
				var err error
				err, downGot, _, downErr = sendRecv(peer, app, down)
				downErr = errors.Join(err, downErr)
				inner.Wait()
				if upErr != nil || downErr != nil {
					t.Errorf("flow %d: up %v, down %v", i, upErr, downErr)
					return
				}
				if upGot != sha256.Sum256(up) || downGot != sha256.Sum256(down) {
					t.Errorf("flow %d: bytes changed on the way", i)
				}
				r := waitResult(t, res, 10*time.Second)
				if r.up != int64(len(up)) || r.down != int64(len(down)) || r.err != nil {
					t.Errorf("flow %d: result up=%d down=%d err=%v, want up=%d down=%d err=nil", i, r.up, r.down, r.err, len(up), len(down))
				}
			}()
		}
		wg.Wait()
	})
}

func TestRelaySlowReceiverGetsEverything(t *testing.T) {
	eachRelay(t, time.Minute, func(t *testing.T, rl *relay) {
		app, peer, res := relayed(t, rl)
		data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
		go func() {
			app.Write(data)
			app.CloseWrite()
		}()
		h := sha256.New()
		buf := make([]byte, 256<<10)
		var n int64
		for {
			m, err := peer.Read(buf)
			h.Write(buf[:m])
			n += int64(m)
			if err != nil {
				break
			}
			if n < 4<<20 {
				time.Sleep(2 * time.Millisecond) // not ordering: a reader slow at first, the relay must hold back
			}
		}
		if got, want := n, int64(len(data)); got != want {
			t.Fatalf("peer got %d bytes, want %d", got, want)
		}
		if !bytes.Equal(h.Sum(nil), func() []byte { s := sha256.Sum256(data); return s[:] }()) {
			t.Fatal("bytes changed on the way")
		}
		peer.CloseWrite()
		if r := waitResult(t, res, 5*time.Second); r.err != nil || r.up != int64(len(data)) {
			t.Errorf("result %+v", r)
		}
	})
}

func TestRelayReceiverThatTakesNothingTimesOut(t *testing.T) {
	eachRelay(t, 300*time.Millisecond, func(t *testing.T, rl *relay) {
		app, _, res := relayed(t, rl)
		go func() {
			buf := make([]byte, 1<<20)
			app.SetWriteDeadline(time.Now().Add(10 * time.Second))
			for {
				if _, err := app.Write(buf); err != nil {
					return
				}
			}
		}()
		r := waitResult(t, res, 5*time.Second)
		if !errors.Is(r.err, errIdle) {
			t.Fatalf("err = %v, want the idle timeout", r.err)
		}
	})
}

func TestRelayPeerResetEndsFlow(t *testing.T) {
	eachRelay(t, time.Minute, func(t *testing.T, rl *relay) {
		app, peer, res := relayed(t, rl)
		app.Write([]byte("hello"))
		buf := make([]byte, 5)
		peer.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
		peer.SetLinger(0)
		peer.Close()
		if r := waitResult(t, res, 5*time.Second); r.err == nil {
			t.Errorf("a reset flow ended without error: %+v", r)
		}
		app.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := app.Read(buf); err == nil {
			t.Error("the application's side is still open after the peer's reset")
		}
	})
}

func TestRelayCloseEndsRunningFlows(t *testing.T) {
	e := newLoopSet(nil)
	rl := &relay{idle: time.Minute, loops: e}
	app, _, res := relayed(t, rl)
	e.Close()
	if r := waitResult(t, res, 5*time.Second); !errors.Is(r.err, errClosed) {
		t.Errorf("err = %v, want %v", r.err, errClosed)
	}
	app.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := app.Read(make([]byte, 1)); err == nil {
		t.Error("the application's side is still open after Close")
	}
	// A flow started after Close fails at once.
	_, _, res = relayed(t, rl)
	if r := waitResult(t, res, time.Second); !errors.Is(r.err, errClosed) {
		t.Errorf("after Close: err = %v, want %v", r.err, errClosed)
	}
}

// TestStatusListsRelayedFlowsUntilTheyEnd: a flow handed to the relay loops stays among the
// live flows until it ends, though its setup goroutine is gone.
func TestStatusListsRelayedFlowsUntilTheyEnd(t *testing.T) {
	target := startTarget(t, "")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	c := e.dial(target)
	io.WriteString(c, "k")
	if readN(t, c, 1) != "k" {
		t.Fatal("echo")
	}
	if live := e.r.Status().Flows; len(live) != 1 || live[0].Dst != target.String() {
		t.Fatalf("live flows while relaying = %+v, want the one to %s", live, target)
	}
	c.Close()
	e.waitLog("up=1 down=1")
	if live := e.r.Status().Flows; len(live) != 0 {
		t.Errorf("live flows after the end = %+v, want none", live)
	}
}

// TestStatusCountsBytes: a live flow shows its bytes and rate as they move; once it ends,
// its bytes stay in the totals and in its rule's row. A refused flow is counted by reason.
func TestStatusCountsBytes(t *testing.T) {
	target := startTarget(t, "hello")
	denied := public(netip.MustParseAddrPort("127.0.0.1:9"))
	e := newEnv(t, Settings{Decision: mustRules(t,
		rules.Rule{Name: "deny", Action: rules.Block, Ports: []rules.PortRange{{Lo: 9, Hi: 9}}},
		rules.Rule{Name: "all", Action: rules.Direct},
	)}, Options{})
	c := e.dial(target)
	if readN(t, c, 5) != "hello" {
		t.Fatal("banner")
	}
	io.WriteString(c, "0123456789")
	readN(t, c, 10)
	// The relay counts right after each move: the client may read the bytes a moment before.
	var st Stats
	_ = wait.Poll(waitFor, func() bool {
		st = e.r.Status()
		return len(st.Flows) != 1 || st.Flows[0].Down >= 15
	})
	if len(st.Flows) != 1 || st.Flows[0].Up != 10 || st.Flows[0].Down != 15 || st.Totals.Live != 1 {
		t.Fatalf("live flow = %+v, totals %+v; want up 10, down 15", st.Flows, st.Totals)
	}
	if st.Flows[0].UpRate == 0 || st.Flows[0].DownRate == 0 {
		t.Errorf("first rates = %d/%d, want the rate since the start", st.Flows[0].UpRate, st.Flows[0].DownRate)
	}
	if st.Rules[1].Bytes != 25 || st.Totals.Up != 10 || st.Totals.Down != 15 {
		t.Errorf("rule bytes %d, totals %+v; want 25, up 10, down 15", st.Rules[1].Bytes, st.Totals)
	}
	c.Close()
	e.waitLog("up=10 down=15")

	d := e.dial(denied)
	wantReset(t, d)
	e.waitLog("rule=deny")
	st = e.r.Status()
	if len(st.Flows) != 0 || st.Totals.Flows != 2 || st.Totals.Up != 10 || st.Totals.Down != 15 {
		t.Errorf("after the end: flows %+v, totals %+v", st.Flows, st.Totals)
	}
	if st.Rules[0].Hits != 1 || st.Rules[0].Bytes != 0 || st.Rules[1].Hits != 1 || st.Rules[1].Bytes != 25 {
		t.Errorf("rules = %+v", st.Rules)
	}
	ref := e.r.Refusals()
	if len(ref) != 1 || ref[0].Reason != refusal.Rule || ref[0].Count != 1 || ref[0].Recent[0].Dst != denied {
		t.Errorf("refusals = %+v, want one by rule to %v", ref, denied)
	}
}

// TestUpstreamDownIsARefusal: a flow for a proxy that cannot be reached is refused and
// counted as upstream-down.
func TestUpstreamDownIsARefusal(t *testing.T) {
	dead := closedAddr(t)
	e := newEnv(t, Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: dead.Port()}}},
	}, Options{})
	wantReset(t, e.dial(startTarget(t, "")))
	e.waitLog("msg=flow")
	if ref := e.r.Refusals(); len(ref) != 1 || ref[0].Reason != refusal.UpstreamDown {
		t.Errorf("refusals = %+v, want one upstream-down", ref)
	}
}

// TestStatusBytesNeverGoBack: while flows end on other goroutines, the byte totals and each
// rule's bytes that Status reports only grow (a flow ending between two reads must not
// vanish from both the live and the ended counts, nor be counted twice).
func TestStatusBytesNeverGoBack(t *testing.T) {
	target := startTarget(t, "")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				c := e.dial(target)
				io.WriteString(c, "0123456789")
				readN(t, c, 10)
				c.Close()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var lastTotal, lastRule uint64
	for polls := 0; ; polls++ {
		st := e.r.Status()
		total, rule := st.Totals.Up+st.Totals.Down, st.Rules[0].Bytes
		if total < lastTotal || rule < lastRule {
			t.Fatalf("poll %d: totals %d after %d, rule bytes %d after %d", polls, total, lastTotal, rule, lastRule)
		}
		lastTotal, lastRule = total, rule
		select {
		case <-done:
			return
		default:
		}
	}
}
