package router

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

func TestSharesAlone(t *testing.T) {
	s := newShares(100, 25, 4, 0)
	n := 0
	for s.tryAcquire("a") {
		n++
	}
	if n != 75 {
		t.Errorf("a lone source took %d slots, want 75 (all but the headroom)", n)
	}
	// A newcomer finds the headroom, up to its own share.
	m := 0
	for s.tryAcquire("b") {
		m++
	}
	if m != 25 {
		t.Errorf("the second source took %d slots, want the 25 left", m)
	}
	if used, sources, _ := s.stats(); used != 100 || sources != 2 {
		t.Errorf("stats = %d used, %d sources", used, sources)
	}
	// a is over its share now (75 > 37): a slot it gives back goes to nobody but b.
	s.release("a")
	if s.tryAcquire("a") {
		t.Error("a source over its share got a slot back")
	}
	if !s.tryAcquire("c") {
		t.Error("a third source got nothing from a free slot")
	}
	for range 75 - 1 {
		s.release("a")
	}
	for range 25 {
		s.release("b")
	}
	s.release("c")
	if used, sources, waiting := s.stats(); used != 0 || sources != 0 || waiting != 0 {
		t.Errorf("after every release: %d used, %d sources, %d waiting", used, sources, waiting)
	}
}

// TestSharesWaitFairly: a source that holds its share and has flows waiting does not hold
// back another source's flow, which is granted at once, and freed slots go to the sources
// under their share first.
func TestSharesWaitFairly(t *testing.T) {
	s := newShares(10, 2, 1, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 8 {
		if err := s.acquire(ctx, "flood"); err != nil {
			t.Fatal(err)
		}
	}
	// The flood's further flows wait.
	var granted atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if s.acquire(ctx, "flood") == nil {
				granted.Add(1)
			}
		})
	}
	waitUntil(t, func() bool { _, _, w := s.stats(); return w == 20 })
	start := time.Now()
	if err := s.acquire(ctx, "guest2"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Millisecond {
		t.Errorf("the second source waited %v", d)
	}
	// A slot the flood gives back goes to the guest, not to the flood's older waiters (the
	// flood is over its share of 4 now).
	s.release("flood")
	if err := s.acquire(ctx, "guest2"); err != nil {
		t.Fatal(err)
	}
	if n := granted.Load(); n != 0 {
		t.Errorf("%d waiting flood flows were granted while over the share", n)
	}
	// Once the guest is gone, the flood is alone again: its oldest waiter gets back to its
	// share of 8, no further.
	s.release("guest2")
	s.release("guest2")
	// The grants are made inside release, under the lock: the queue says how many there were.
	if _, _, w := s.stats(); w != 20-1 {
		t.Errorf("%d waiters granted, want 1 (up to the lone share)", 20-w)
	}
	waitUntil(t, func() bool { return granted.Load() >= 1 })
	if n := granted.Load(); n != 1 {
		t.Errorf("%d waiters granted, want 1 (up to the lone share)", n)
	}
	cancel()
	wg.Wait()
	for used, _, _ := s.stats(); used > 0; used, _, _ = s.stats() {
		s.release("flood")
	}
	if used, sources, waiting := s.stats(); used != 0 || sources != 0 || waiting != 0 {
		t.Errorf("at the end: %d used, %d sources, %d waiting", used, sources, waiting)
	}
}

func TestSharesRefuseTooManyWaiting(t *testing.T) {
	s := newShares(2, 0, 1, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.acquire(ctx, "a")
	s.acquire(ctx, "a")
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- s.acquire(ctx, "a") }()
	}
	waitUntil(t, func() bool { _, _, w := s.stats(); return w == 3 })
	if err := s.acquire(ctx, "a"); !errors.Is(err, errBusy) {
		t.Errorf("the fourth waiter: %v, want errBusy", err)
	}
	cancel()
	for range 3 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
	}
	s.release("a")
	s.release("a")
	if used, sources, waiting := s.stats(); used != 0 || sources != 0 || waiting != 0 {
		t.Errorf("at the end: %d used, %d sources, %d waiting", used, sources, waiting)
	}
}

// TestSharesRandom: many sources acquiring, timing out and releasing at random never
// exceed the capacity, and leave nothing behind.
func TestSharesRandom(t *testing.T) {
	s := newShares(20, 5, 2, 10)
	var inUse atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			key := fmt.Sprint("s", g%5)
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3))*time.Millisecond)
				err := s.acquire(ctx, key)
				cancel()
				if err != nil {
					continue
				}
				if n := inUse.Add(1); n > 20 {
					t.Errorf("%d slots in use, capacity 20", n)
				}
				time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond) // not ordering: a random hold, to shuffle the interleavings
				inUse.Add(-1)
				s.release(key)
			}
		})
	}
	wg.Wait()
	if used, sources, waiting := s.stats(); used != 0 || sources != 0 || waiting != 0 {
		t.Errorf("at the end: %d used, %d sources, %d waiting", used, sources, waiting)
	}
}

func TestBudgetFor(t *testing.T) {
	for _, c := range []struct{ limit, flows, forwards, inbounds int }{
		{20000, (20000 - reserveDescriptors - 625) / 2, reserveDescriptors / 8, 312},
		{3000, (3000 - reserveDescriptors - 128) / 2, reserveDescriptors / 8, 64},
		{1024, (1024 - 512 - 128) / 2, 512 / 8, 64},
		{0, (defaultDescriptors - reserveDescriptors - 2048) / 2, reserveDescriptors / 8, 1024},
		{10, 16, 8, 16},
	} {
		b := budgetFor(c.limit)
		if b.flows != c.flows || b.forwards != c.forwards || b.inbounds != c.inbounds {
			t.Errorf("budgetFor(%d) = %+v; want flows %d, forwards %d, inbounds %d", c.limit, b, c.flows, c.forwards, c.inbounds)
		}
		if c.limit >= 1024 {
			if used := min(reserveDescriptors, c.limit/2) + 2*b.flows + 2*b.inbounds; used > c.limit {
				t.Errorf("budgetFor(%d): %d descriptors in the shares, over the limit", c.limit, used)
			}
		}
	}
	// Under the lab's limit a lone source may hold 9,000 idle flows (the memory benchmark).
	a := newAdmission(20000)
	n := 0
	for a.flows.tryAcquire("vm 10.0.2.15") {
		n++
	}
	if n < 9000 {
		t.Errorf("a lone source may hold %d flows under 20,000 descriptors, want at least 9,000", n)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	wait.For(t, "the condition", waitFor, cond)
}

// twoSources is a router test env whose flows come from the source the test names (a
// guest or a second one), not from the loopback client.
type twoSources struct {
	*env
	mu   sync.Mutex
	from map[netip.AddrPort][2]netip.AddrPort // client address -> source, destination
}

func newTwoSources(t *testing.T, pol Settings, opts Options) *twoSources {
	ts := &twoSources{from: map[netip.AddrPort][2]netip.AddrPort{}}
	opts.Original = func(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
		// The router may accept before dialFrom recorded the client: wait for it.
		var m [2]netip.AddrPort
		err := wait.Until(waitFor, func() error {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			var ok bool
			if m, ok = ts.from[netaddr.AddrPort(c.RemoteAddr())]; !ok {
				return errors.New("unknown client")
			}
			return nil
		})
		return m[0], m[1], err
	}
	ts.env = newEnv(t, pol, opts)
	return ts
}

func (ts *twoSources) dialFrom(src string, dst netip.AddrPort) *net.TCPConn {
	ts.t.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netaddr.AddrPort(ts.ln.Addr())))
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.mu.Lock()
	ts.from[netaddr.AddrPort(c.LocalAddr())] = [2]netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr(src), 40000), dst}
	ts.mu.Unlock()
	c.SetDeadline(time.Now().Add(waitFor))
	ts.t.Cleanup(func() { c.Close() })
	return c
}

// silentProxy accepts connections and never answers: a SOCKS CONNECT to a destination that
// does not answer either.
func silentProxy(t *testing.T) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// silentPolicy sends 203.0.113.0/24 to a proxy that never answers and the rest direct.
func silentPolicy(t *testing.T, connectTimeout time.Duration) Settings {
	silent := silentProxy(t)
	return Settings{
		Decision: mustRules(t,
			hostRule("silent", rules.Proxy, "silent", "203.0.113.0/24"),
			rules.Rule{Name: "rest", Action: rules.Direct}),
		Upstreams:      []UpstreamConfig{{Config: upstream.Config{Name: "silent", Host: "127.0.0.1", Port: silent.Port()}}},
		ConnectTimeout: connectTimeout,
	}
}

// TestFloodDoesNotHoldBackOthers: one source holds 300 flows to silent destinations; a flow
// of another source is set up at once, and the flood gets its share of set-up slots, not
// all of them.
func TestFloodDoesNotHoldBackOthers(t *testing.T) {
	target := startTarget(t, "hello\n")
	ts := newTwoSources(t, silentPolicy(t, 2*time.Second), Options{})
	for i := range 300 {
		// Ten silent destinations: the per-destination cap (32) is not what stops them.
		ts.dialFrom("10.0.2.15", netip.MustParseAddrPort(fmt.Sprintf("203.0.113.%d:80", 1+i%10)))
	}
	waitUntil(t, func() bool { used, _, _ := ts.r.adm.setups.stats(); return used == maxSetups-maxSetups/4 })
	start := time.Now()
	c := ts.dialFrom("10.0.2.16", target)
	if got := readN(t, c, 6); got != "hello\n" {
		t.Fatalf("second source: %q", got)
	}
	took := time.Since(start)
	t.Logf("second source's flow answered after %v with the flood holding %d set-up slots", took, maxSetups-maxSetups/4)
	// Held back, it would wait for the flood's 2 s connect timeout; 500 ms leaves room for a
	// loaded machine under the race detector without hiding that.
	if took > 500*time.Millisecond {
		t.Errorf("second source waited %v, want under 500 ms (the flood's set-ups time out after 2 s)", took)
	}
	used, sources, waiting := ts.r.adm.setups.stats()
	t.Logf("set-up slots: %d used, %d sources, %d waiting", used, sources, waiting)
	if used > maxSetups-maxSetups/4 {
		t.Errorf("the flood holds %d set-up slots, more than a lone source's share", used)
	}
}

// TestSilentDestinationCapped: flows to one silent destination beyond perDestination wait
// for its turn, holding no set-up slot, and are refused when the connect timeout ends.
func TestSilentDestinationCapped(t *testing.T) {
	ts := newTwoSources(t, silentPolicy(t, 2*time.Second), Options{})
	var cs []*net.TCPConn
	for range perDestination + 8 {
		cs = append(cs, ts.dialFrom("10.0.2.15", netip.MustParseAddrPort("203.0.113.9:80")))
	}
	waitUntil(t, func() bool {
		ts.r.adm.mu.Lock()
		defer ts.r.adm.mu.Unlock()
		d := ts.r.adm.dst[dstKey{addr: netip.MustParseAddr("203.0.113.9")}]
		return d != nil && d.held == perDestination && len(d.waiting) == 8
	})
	if used, _, _ := ts.r.adm.setups.stats(); used != perDestination {
		t.Errorf("%d set-up slots used, want %d (the waiting flows hold none)", used, perDestination)
	}
	refused := 0
	for _, c := range cs {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeoutErr(err) {
			refused++
		}
	}
	if refused != 0 {
		t.Errorf("%d flows to one silent destination refused at once, want none (they wait)", refused)
	}
	for _, c := range cs { // all refused once the connect timeout ends
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
			t.Fatalf("a flow to a silent destination: %v, want a reset", err)
		}
	}
}

// TestDestinationTurns: beyond the per-destination cap flows wait in order; a slot given
// back goes to the first waiting, one whose wait ends leaves the queue, and too many
// waiting are refused at once.
func TestDestinationTurns(t *testing.T) {
	a := newAdmission(0)
	a.perDst = 2
	ctx := context.Background()
	d, e := dstKey{host: "d"}, dstKey{addr: netip.MustParseAddr("192.0.2.1")}
	for range 2 {
		if err := a.dstAcquire(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan int, 3)
	short, cancel := context.WithCancel(ctx)
	for i := range 3 {
		c := ctx
		if i == 1 {
			c = short
		}
		go func() {
			if err := a.dstAcquire(c, d); err != nil {
				got <- -1 - i
				return
			}
			got <- i
		}()
		waitUntil(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.dst[d].waiting) == i+1 })
	}
	if a.dstTryAcquire(d) {
		t.Fatal("dstTryAcquire took a slot of a destination at its cap")
	}
	cancel()
	if g := <-got; g != -2 {
		t.Fatalf("got %d, want the second waiter's wait ended (-2)", g)
	}
	a.dstRelease(d, time.Time{})
	if g := <-got; g != 0 {
		t.Fatalf("slot went to waiter %d, want the first (0)", g)
	}
	a.dstRelease(d, time.Time{})
	if g := <-got; g != 2 {
		t.Fatalf("slot went to waiter %d, want the third (2)", g)
	}
	a.dstRelease(d, time.Time{}) // its slots: 1 held, nobody waiting
	if !a.dstTryAcquire(d) {
		t.Fatal("dstTryAcquire found no slot free under the cap")
	}
	a.perDst = 0 // every flow waits
	var wg sync.WaitGroup
	for range maxSetups {
		wg.Go(func() { a.dstAcquire(short, e) }) // short is over: each returns at once
	}
	wg.Wait() // (not a wait for a.dst[e] to be nil: it is before the first one starts)
	for _, key := range []dstKey{d, d} {
		a.dstRelease(key, time.Time{})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.dst) != 0 {
		t.Errorf("destinations left: %v", a.dst)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestDescriptorBudget: relayed flows take their source's share of the budget; beyond it
// they are refused at once, and another source still gets flows.
func TestDescriptorBudget(t *testing.T) {
	target := startTarget(t, "hello\n")
	// 200 descriptors: 100 reserved, 25 for the inbounds, 37 flows; a lone source may hold
	// 37-16 = 21.
	ts := newTwoSources(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{Descriptors: 200})
	b := budgetFor(200)
	want := b.flows - 16
	ok := 0
	for range b.flows {
		c := ts.dialFrom("10.0.2.15", target)
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 6)
		if n, _ := c.Read(b); n > 0 {
			ok++
		}
	}
	if ok != want {
		t.Errorf("a lone source relayed %d flows, want %d of a budget of %d", ok, want, b.flows)
	}
	c := ts.dialFrom("10.0.2.16", target)
	if got := readN(t, c, 6); got != "hello\n" {
		t.Errorf("second source: %q", got)
	}
	ts.waitLog(errOverShare.Error())
}

// TestRefusalsSummarized: a flood of refused flows logs a few records and one summary line.
func TestRefusalsSummarized(t *testing.T) {
	target := startTarget(t, "hello\n")
	pol := Settings{Decision: mustRules(t, hostRule("no", rules.Block, "", target.Addr().String()))}
	// One interval for the whole flood, however long it takes here; the line is flushed
	// by hand (package tally tests its timer).
	e := newEnv(t, pol, Options{SummaryEvery: time.Hour})
	for range 50 {
		c := e.dial(target)
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("read = %d, %v; want the flow refused", n, err)
		}
	}
	// The client sees its reset before the router counts the refusal: wait for the 50th.
	waitUntil(t, func() bool { return e.r.refuse.s.Count("refused by no") == 50 })
	// A refusal is counted before its flow record is written: wait for the records too.
	waitUntil(t, func() bool { return strings.Count(e.logs.String(), "msg=flow ") >= perReasonLogged })
	e.r.refuse.flush()
	e.waitLog("refused or failed flows (summary)")
	logs := e.logs.String()
	if n := strings.Count(logs, "msg=flow "); n != perReasonLogged {
		t.Errorf("%d flow records, want %d", n, perReasonLogged)
	}
	if !strings.Contains(logs, `"refused by no"=50`) || !strings.Contains(logs, "not_logged_one_by_one=45") {
		t.Errorf("summary lacks the counts:\n%s", logs)
	}
	_ = policy.StepRule
}

// TestDestinationThatAnswersIsNotCapped: a set-up that ends quickly marks its destination
// as answering: every flow waiting for it goes, and the next ones take no turn, for
// quickSetup; a slow set-up lets one waiting flow go and leaves the cap in force.
func TestDestinationThatAnswersIsNotCapped(t *testing.T) {
	a := newAdmission(0)
	a.perDst = 2
	d := dstKey{host: "busy.example"}
	ctx := context.Background()
	for range 2 {
		if !a.dstTryAcquire(d) {
			t.Fatal("no slot under the cap")
		}
	}
	if a.dstTryAcquire(d) {
		t.Fatal("a slot beyond the cap of a destination that never answered")
	}
	got := make(chan error, 3)
	for i := range 3 {
		go func() { got <- a.dstAcquire(ctx, d) }()
		waitUntil(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.dst[d].waiting) == i+1 })
	}
	a.dstRelease(d, time.Now().Add(-2*quickSetup)) // slow: one waiting flow goes
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("a second waiting flow went after a slow set-up (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	a.dstRelease(d, time.Now()) // quick: the other two go
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if !a.dstTryAcquire(d) {
		t.Error("no slot at once for a destination that answered just now")
	}
	a.mu.Lock()
	held := a.dst[d].held
	a.mu.Unlock()
	if held != 4 {
		t.Errorf("%d slots held, want 4 (2 + 2 waiting that went - 1 quick + 1 taken)", held)
	}
}
