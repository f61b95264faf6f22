package router

import (
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/router/sockmap"
	"github.com/agentcage/router/rules"
)

// Tests of the relay through the sockmap (root: see kernelRelay), beside the relay tests
// that run with and without it (relay_test.go).

// randomBytes returns n bytes of a seeded stream.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// kernelFlow returns the sockmap flow behind a meter the relay put into the sockmap.
func kernelFlow(t *testing.T, m *meter) *sockmap.Flow {
	t.Helper()
	k := m.kernel.Load()
	if k == nil {
		t.Fatal("the flow is not in the sockmap")
	}
	return k.f
}

// relayedMeter is relayed that also returns the flow's meter.
func relayedMeter(t *testing.T, rl *relay) (app, peer *net.TCPConn, m *meter, res <-chan result) {
	t.Helper()
	app, a := tcpPair(t)
	b, peer := tcpPair(t)
	ch := make(chan result, 1)
	m = new(meter)
	rl.start(a, b, m, func(r result) { ch <- r })
	kernelFlow(t, m)
	return app, peer, m, ch
}

// TestKernelRelayManyFlowsRandomSizes: flows at once, of random sizes both ways (zero
// included), arrive whole and in order, and each result counts them.
func TestKernelRelayManyFlowsRandomSizes(t *testing.T) {
	rl := kernelRelay(t, time.Minute)
	const flows = 64
	rng := rand.New(rand.NewPCG(17, 17))
	var wg sync.WaitGroup
	for i := range flows {
		app, peer, res := relayed(t, rl)
		up := randomBytes(uint64(2*i), rng.IntN(3<<20))
		down := randomBytes(uint64(2*i+1), rng.IntN(1<<20))
		if i%8 == 0 {
			down = nil
		}
		wg.Go(func() {
			var upGot, downGot [32]byte
			var upErr, downErr error
			var inner sync.WaitGroup
			inner.Go(func() {
				var err error
				err, upGot, _, upErr = sendRecv(app, peer, up)
				upErr = errors.Join(err, upErr)
			})
			var err error
			err, downGot, _, downErr = sendRecv(peer, app, down)
			downErr = errors.Join(err, downErr)
			inner.Wait()
			if upErr != nil || downErr != nil {
				t.Errorf("flow %d: up %v, down %v", i, upErr, downErr)
				return
			}
			if upGot != sha256.Sum256(up) || downGot != sha256.Sum256(down) {
				t.Errorf("flow %d (%d up, %d down): bytes changed on the way", i, len(up), len(down))
			}
			r := waitResult(t, res, 20*time.Second)
			if r.up != int64(len(up)) || r.down != int64(len(down)) || r.err != nil {
				t.Errorf("flow %d: result up=%d down=%d err=%v, want %d, %d, nil", i, r.up, r.down, r.err, len(up), len(down))
			}
		})
	}
	wg.Wait()
}

// TestKernelRelayHalfClose: the FIN of one side reaches the other only after every byte
// before it, though the kernel redirected them and the FIN is the relay's to pass on: a
// client that shuts its sending side right after a large request gets the whole answer,
// and a server that closes right after a large answer has all of it delivered. The budget
// is large here so that the kernel redirects everything, and the receiver waits before it
// reads: megabytes are still queued on the peer's psock when the FIN comes. Without the
// drain before the half-close (kclose), the FIN overtakes them and cuts them.
func TestKernelRelayHalfClose(t *testing.T) {
	rl := kernelRelayBudget(t, time.Minute, 256<<20)
	for _, tc := range []struct {
		name     string
		req, ans int
	}{
		{"large request, client shuts its sending side", 24 << 20, 1 << 10},
		{"large answer, server closes after it", 1 << 10, 24 << 20},
		{"both large", 16 << 20, 16 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, peer, res := relayed(t, rl)
			req, ans := randomBytes(1, tc.req), randomBytes(2, tc.ans)
			server := make(chan error, 1)
			go func() {
				// The server reads the request to EOF (slowly), answers, and closes.
				time.Sleep(200 * time.Millisecond) // not ordering: a receiver slow to start, so bytes queue when the FIN comes
				got, err := slowRead(peer, 256<<10)
				if err != nil {
					server <- err
					return
				}
				if sha256.Sum256(got) != sha256.Sum256(req) {
					server <- errors.New("the request changed on the way")
					return
				}
				_, err = peer.Write(ans)
				server <- errors.Join(err, peer.Close())
			}()
			if _, err := app.Write(req); err != nil {
				t.Fatal(err)
			}
			app.CloseWrite()
			time.Sleep(200 * time.Millisecond) // not ordering: as above, the client slow to read the answer
			got, err := slowRead(app, 256<<10)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-server; err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ans) || sha256.Sum256(got) != sha256.Sum256(ans) {
				t.Fatalf("the client got %d bytes of the %d-byte answer, or changed ones", len(got), len(ans))
			}
			if r := waitResult(t, res, 10*time.Second); r.err != nil || r.up != int64(len(req)) || r.down != int64(len(ans)) {
				t.Errorf("result %+v", r)
			}
		})
	}
}

// slowRead reads c to EOF, pausing after every chunk bytes.
func slowRead(c *net.TCPConn, chunk int) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var out []byte
	buf := make([]byte, chunk)
	for {
		n, err := io.ReadFull(c, buf)
		out = append(out, buf[:n]...)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return out, nil
		case err != nil:
			return out, err
		}
		time.Sleep(5 * time.Millisecond) // not ordering: the slow reader
	}
}

// TestKernelRelaySlowReaderIsBounded: a sender far faster than a reader that stops reading
// does not grow the router's memory: the bytes queued toward the reader on the kernel's
// psock stay within the budget, the rest waits in the relay's own socket buffers, whose
// window closes on the sender (its writes stop being taken). Then the reader takes it all,
// whole and in order, and as it keeps up the kernel redirects again.
func TestKernelRelaySlowReaderIsBounded(t *testing.T) {
	rl := kernelRelay(t, time.Minute)
	app, peer, m, res := relayedMeter(t, rl)
	kf := kernelFlow(t, m)
	data := randomBytes(3, 256<<20)
	var accepted sync.Mutex
	taken := 0
	go func() {
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := app.Write(data[off : off+64<<10]); err != nil {
				return
			}
			accepted.Lock()
			taken = off + 64<<10
			accepted.Unlock()
		}
		app.CloseWrite()
	}()
	// The reader reads nothing for a while.
	var worstQueue uint64
	var plateau []int
	for range 20 {
		time.Sleep(50 * time.Millisecond) // not ordering: the reader's 1 s pause, sampled
		if q := psockQueue(t, kf, 0); q > worstQueue {
			worstQueue = q
		}
		accepted.Lock()
		plateau = append(plateau, taken)
		accepted.Unlock()
	}
	const slack = 512 << 10 // the segments in flight when the program stopped redirecting
	if worstQueue > sockmap.DefaultBudget+slack {
		t.Errorf("the psock queued %d bytes toward a reader that reads nothing, want at most %d", worstQueue, sockmap.DefaultBudget+slack)
	}
	if !kf.Passing(0) {
		t.Error("the program still redirects toward a reader that reads nothing")
	}
	if last := plateau[len(plateau)-1]; last != plateau[len(plateau)/2] || last >= len(data)/2 {
		t.Errorf("the sender's writes were still taken while nobody read (%d bytes by the middle, %d by the end of %d)", plateau[len(plateau)/2], last, len(data))
	}
	t.Logf("psock queue at worst %d KiB; the sender got %d KiB in before its window closed", worstQueue>>10, plateau[len(plateau)-1]>>10)
	redPaused := kf.Redirected(0)
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(data) || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("the reader got %d of %d bytes, or changed ones", len(got), len(data))
	}
	// Once the reader reads again and the loop caught up, the program redirects again.
	if red := kf.Redirected(0); red == redPaused {
		t.Errorf("after the pause the kernel redirected %d bytes of %d (trips %d)", red-redPaused, len(data)-int(redPaused), kf.Trips(0))
	}
	peer.CloseWrite()
	if r := waitResult(t, res, 10*time.Second); r.err != nil || r.up != int64(len(data)) {
		t.Errorf("result %+v", r)
	}
}

// psockQueue is how many bytes the program redirected from side s that the other socket
// has not yet taken into its send queue (before the loop copies anything itself: after, it
// is 0, as the loop copies only once the queue drained).
func psockQueue(t *testing.T, kf *sockmap.Flow, s int) uint64 {
	t.Helper()
	red, taken := kf.Redirected(s), kf.Taken(s)
	if taken >= red {
		return 0
	}
	return red - taken
}

// TestKernelRelayIdle: a flow whose bytes the kernel moves is not idle while they move,
// though the loop never sees them; once they stop both ways it ends with the idle timeout.
func TestKernelRelayIdle(t *testing.T) {
	rl := kernelRelay(t, 300*time.Millisecond)
	app, peer, m, res := relayedMeter(t, rl)
	buf := make([]byte, 1)
	for range 12 { // 1.2 s of a byte each 100 ms, longer than the idle timeout
		if _, err := app.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		peer.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatalf("the flow ended while bytes moved: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // not ordering: a byte each 100 ms, paced under the idle timeout
	}
	select {
	case r := <-res:
		t.Fatalf("the flow ended while bytes moved: %+v", r)
	default:
	}
	if up, _ := m.load(); up != 12 {
		t.Errorf("meter up = %d, want 12", up)
	}
	start := time.Now()
	r := waitResult(t, res, 3*time.Second)
	if !errors.Is(r.err, errIdle) || r.up != 12 {
		t.Errorf("result %+v, want 12 bytes up and the idle timeout", r)
	}
	t.Logf("ended %v after the last byte", time.Since(start).Round(time.Millisecond))
}

// TestKernelRelayCounters: the live counters move as the kernel redirects, read from memory
// shared with the program, while the loop does nothing.
func TestKernelRelayCounters(t *testing.T) {
	rl := kernelRelay(t, time.Minute)
	app, peer, m, res := relayedMeter(t, rl)
	up, down := randomBytes(4, 3<<20), randomBytes(5, 1<<20)
	go app.Write(up)
	if _, err := io.ReadFull(peer, make([]byte, len(up))); err != nil {
		t.Fatal(err)
	}
	go peer.Write(down)
	if _, err := io.ReadFull(app, make([]byte, len(down))); err != nil {
		t.Fatal(err)
	}
	if u, d := m.load(); u != int64(len(up)) || d != int64(len(down)) {
		t.Errorf("meter = %d up, %d down; want %d, %d", u, d, len(up), len(down))
	}
	app.Close()
	peer.Close()
	if r := waitResult(t, res, 5*time.Second); r.up != int64(len(up)) || r.down != int64(len(down)) {
		t.Errorf("result %+v", r)
	}
}

// TestStatusCountsKernelBytes: status shows a sockmap flow's bytes as they move.
func TestStatusCountsKernelBytes(t *testing.T) {
	kernelRelay(t, time.Minute) // root, and the sockmap loads
	target := startTarget(t, "hello")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct}), Sockmap: true}, Options{})
	c := e.dial(target)
	if readN(t, c, 5) != "hello" {
		t.Fatal("banner")
	}
	data := randomBytes(6, 1<<20)
	go c.Write(data)
	if _, err := io.ReadFull(c, make([]byte, len(data))); err != nil {
		t.Fatal(err)
	}
	st := e.r.Status()
	if len(st.Flows) != 1 || st.Flows[0].Up != uint64(len(data)) || st.Flows[0].Down != uint64(5+len(data)) {
		t.Fatalf("live flow = %+v, want %d up and %d down", st.Flows, len(data), 5+len(data))
	}
	c.Close()
	e.waitLog("up=1048576 down=1048581")
}

// TestKernelRelayPromotes: with a threshold (kernelAfter, 0 by default), a flow starts
// spliced and enters the sockmap once it moved that many bytes; the bytes before, during
// and after arrive whole.
func TestKernelRelayPromotes(t *testing.T) {
	rl := kernelRelay(t, time.Minute)
	rl.loops.kernel.after = 1 << 20
	rl.sockmap = false // relayed: not in the sockmap at its start
	app, peer, m, res := func() (*net.TCPConn, *net.TCPConn, *meter, <-chan result) {
		app, a := tcpPair(t)
		b, peer := tcpPair(t)
		ch := make(chan result, 1)
		m := new(meter)
		r := *rl
		r.sockmap = true
		r.start(a, b, m, func(r result) { ch <- r })
		return app, peer, m, ch
	}()
	if m.kernel.Load() != nil {
		t.Fatal("the flow entered the sockmap before it moved anything")
	}
	up, down := randomBytes(7, 16<<20), randomBytes(8, 3<<20)
	seen := make(chan *kernelBytes, 1)
	stop := make(chan struct{})
	go func() {
		defer close(seen)
		for {
			if k := m.kernel.Load(); k != nil {
				seen <- k
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	// Both directions stay open while the large one moves (a socket that sent or got a
	// FIN cannot join a sockmap): the peer answers once it has the whole request.
	server := make(chan error, 1)
	go func() {
		got := make([]byte, len(up))
		peer.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(peer, got); err != nil {
			server <- err
			return
		}
		if sha256.Sum256(got) != sha256.Sum256(up) {
			server <- errors.New("the request changed on the way")
			return
		}
		_, err := peer.Write(down)
		server <- errors.Join(err, peer.CloseWrite())
	}()
	if _, err := app.Write(up); err != nil {
		t.Fatal(err)
	}
	app.SetDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(app)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-server; err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(down) {
		t.Fatal("the answer changed on the way")
	}
	app.CloseWrite()
	close(stop)
	k := <-seen
	if k == nil {
		t.Fatal("the flow never entered the sockmap")
	}
	if k.f.Redirected(0)+k.f.Redirected(1) == 0 {
		t.Error("the kernel redirected nothing")
	}
	if r := waitResult(t, res, 10*time.Second); r.err != nil || r.up != int64(len(up)) || r.down != int64(len(down)) {
		t.Errorf("result %+v", r)
	}
}

// TestLoopFlowsEnterSockmap: with the sockmap on, a flow the loops set up themselves, direct
// or through a SOCKS5 proxy, enters it at its relay's start like a flow set up on a
// goroutine (the same suite with ROUTER_TEST_SLOW_SETUP=1), and its bytes arrive whole.
func TestLoopFlowsEnterSockmap(t *testing.T) {
	roottest.Require(t)
	target := startTarget(t, "hello\n")
	gs := startProxy(t, nil, nil)
	for _, tc := range []struct {
		name string
		pol  Settings
	}{
		{"direct", Settings{Decision: decision([]rules.Rule{{Name: "all", Action: rules.Direct}})}},
		{"socks5", proxied(gs.Addr, true, "", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pol.Sockmap = true
			e := newEnv(t, tc.pol, Options{})
			if e.r.loops.kernel.get() == nil {
				t.Fatal("the sockmap could not be loaded")
			}
			c := e.dial(target)
			if got := readN(t, c, 6); got != "hello\n" {
				t.Fatalf("banner %q", got)
			}
			var k *kernelBytes
			waitUntil(t, func() bool {
				e.r.live.mu.Lock()
				defer e.r.live.mu.Unlock()
				for _, f := range e.r.live.m {
					k = f.bytes.kernel.Load()
				}
				return k != nil
			})
			data := randomBytes(9, 1<<20)
			go c.Write(data)
			got := make([]byte, len(data))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(got) != sha256.Sum256(data) {
				t.Fatal("the echo changed on the way")
			}
			if k.f.Redirected(0) == 0 || k.f.Redirected(1) == 0 {
				t.Errorf("the kernel redirected %d up, %d down; want both", k.f.Redirected(0), k.f.Redirected(1))
			}
			c.Close()
			wantLoopFlows(t, e.r, 1)
			e.waitLog("msg=flow ")
		})
	}
}
