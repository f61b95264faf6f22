package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/internal/wait"
)

// dialFrom opens a DNS-over-TCP connection to addr from the loopback address local.
func dialFrom(t *testing.T, local, addr string) *mdns.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, local, err)
	}
	t.Cleanup(func() { c.Close() })
	return &mdns.Conn{Conn: c}
}

// ask sends one A query on c and reports whether an answer came back within 5 s.
func ask(c *mdns.Conn, name string) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	q := query(name, mdns.TypeA)
	if err := c.WriteMsg(q); err != nil {
		return err
	}
	r, err := c.ReadMsg()
	if err != nil {
		return err
	}
	if r.Id != q.Id || r.Rcode != mdns.RcodeSuccess {
		return fmt.Errorf("id %d rcode %s", r.Id, mdns.RcodeToString[r.Rcode])
	}
	return nil
}

func TestServeTCPLimits(t *testing.T) {
	t.Run("unlimited queries on one connection", func(t *testing.T) {
		s := newFakeIP(t, Config{})
		_, tcpAddr, _ := serve(t, s)
		c := dialFrom(t, "127.0.0.1", tcpAddr)
		for i := range 1000 { // miekg's default closed the connection after 128
			if err := ask(c, fmt.Sprintf("q%d.example.", i)); err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
		}
	})
	t.Run("an idle connection is closed, an active one is not", func(t *testing.T) {
		s := newFakeIP(t, Config{})
		s.tcpIdle = 300 * time.Millisecond
		_, tcpAddr, _ := serve(t, s)
		c := dialFrom(t, "127.0.0.1", tcpAddr)
		for i := range 8 { // 8 queries 100 ms apart: longer than the idle timeout in all
			if err := ask(c, fmt.Sprintf("q%d.example.", i)); err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond) // not ordering: queries paced under the idle timeout
		}
		// Idle now: the server closes the connection after its timeout.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Conn.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
			t.Fatalf("an idle connection: read %v, want it closed by the server", err)
		}
		if err := ask(c, "late.example."); err == nil {
			t.Error("query after the idle timeout answered, want the connection closed")
		}
	})
	t.Run("per source", func(t *testing.T) {
		s := newFakeIP(t, Config{})
		s.tcpPerSource = 3
		_, tcpAddr, _ := serve(t, s)
		var conns []*mdns.Conn
		for i := range 3 {
			c := dialFrom(t, "127.0.0.1", tcpAddr)
			if err := ask(c, fmt.Sprintf("c%d.example.", i)); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, c)
		}
		if err := ask(dialFrom(t, "127.0.0.1", tcpAddr), "over.example."); err == nil {
			t.Error("a 4th connection of one source was served, want it closed")
		}
		if err := ask(dialFrom(t, "127.0.0.2", tcpAddr), "other.example."); err != nil {
			t.Errorf("another source: %v", err)
		}
		conns[0].Close()
		if err := wait.Until(5*time.Second, func() error {
			return ask(dialFrom(t, "127.0.0.1", tcpAddr), "again.example.")
		}); err != nil {
			t.Fatalf("no connection of the source served after one closed: %v", err)
		}
	})
	t.Run("in all: the source holding the most gives way", func(t *testing.T) {
		s := newFakeIP(t, Config{})
		s.tcpPerSource, s.tcpTotal = 4, 4
		_, tcpAddr, _ := serve(t, s)
		var a []*mdns.Conn
		for i := range 4 {
			c := dialFrom(t, "127.0.0.1", tcpAddr)
			if err := ask(c, fmt.Sprintf("a%d.example.", i)); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			a = append(a, c)
		}
		// The answers order the reads: a[0]'s was before the next ones of the others.
		for i, c := range a[1:] { // a[0] is now the least recently active
			if err := ask(c, fmt.Sprintf("a%d-again.example.", i)); err != nil {
				t.Fatal(err)
			}
		}
		b := dialFrom(t, "127.0.0.2", tcpAddr)
		if err := ask(b, "b.example."); err != nil {
			t.Fatalf("newcomer at the limit: %v", err)
		}
		if err := ask(a[0], "a0-late.example."); err == nil {
			t.Error("the least recently active connection of the biggest source still served")
		}
		for i, c := range a[1:] {
			if err := ask(c, fmt.Sprintf("a%d-late.example.", i+1)); err != nil {
				t.Errorf("connection a%d: %v", i+1, err)
			}
		}
		// 127.0.0.1 holds 3, 127.0.0.2 one: a third source still gets in (127.0.0.1 is down
		// to 2); then a second connection of 127.0.0.2 would hold as many as the biggest: no.
		if err := ask(dialFrom(t, "127.0.0.3", tcpAddr), "c.example."); err != nil {
			t.Errorf("third source: %v", err)
		}
		if err := ask(dialFrom(t, "127.0.0.2", tcpAddr), "b2.example."); err == nil {
			t.Error("a second connection of 127.0.0.2 was served, want it closed")
		}
	})
}

// flakyListener fails Accept with errs first, then hands out conns, then reports closed.
type flakyListener struct {
	mu      sync.Mutex
	errs    []error
	conns   []net.Conn
	calls   []time.Time
	done    chan struct{}
	blocked chan struct{} // when not nil, told when an Accept waits for Close
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.calls = append(l.calls, time.Now())
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	if len(l.conns) > 0 {
		c := l.conns[0]
		l.conns = l.conns[1:]
		l.mu.Unlock()
		return c, nil
	}
	blocked := l.blocked
	l.mu.Unlock()
	if blocked != nil {
		blocked <- struct{}{}
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *flakyListener) Close() error   { close(l.done); return nil }
func (l *flakyListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }

func TestLimitListenerAcceptErrors(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: &osSyscallError{syscall.EMFILE}}
	c1, c2 := net.Pipe()
	defer c2.Close()
	fl := &flakyListener{errs: []error{emfile, emfile, emfile, emfile, emfile}, conns: []net.Conn{c1}, done: make(chan struct{})}
	var mu sync.Mutex
	var notes []event
	l := newLimitListener(fl, 4, 8, func(ev event, k sourceKey, err error) {
		mu.Lock()
		notes = append(notes, ev)
		mu.Unlock()
	})
	start := time.Now()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept = %v, want the connection after the errors", err)
	}
	c.Close()
	took := time.Since(start)
	// Pauses of 5, 10, 20, 40 and 80 ms.
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("Accept took %v through 5 errors, want about 155 ms of pauses", took)
	}
	mu.Lock()
	if len(notes) != 5 || notes[0] != evAcceptFailed {
		t.Errorf("notes = %v, want 5 accept_failed", notes)
	}
	mu.Unlock()
	if all, _ := l.count(sourceKey{}); all != 0 {
		t.Errorf("%d connections counted after Close, want 0", all)
	}
	fl.mu.Lock()
	fl.blocked = make(chan struct{}, 1)
	fl.mu.Unlock()
	go func() { <-fl.blocked; l.Close() }() // Close while Accept waits
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}

	t.Run("Close during a pause ends Accept at once", func(t *testing.T) {
		// In a bubble: the pause's timer cannot fire while the closer runs, so Close
		// comes during the first pause.
		synctest.Test(t, func(t *testing.T) {
			fl := &flakyListener{done: make(chan struct{})}
			for range 20 {
				fl.errs = append(fl.errs, emfile)
			}
			failed := make(chan struct{}, 20)
			l := newLimitListener(fl, 4, 8, func(ev event, _ sourceKey, _ error) {
				if ev == evAcceptFailed {
					failed <- struct{}{}
				}
			})
			go func() { <-failed; l.Close() }()
			start := time.Now()
			if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept = %v, want net.ErrClosed", err)
			}
			if d := time.Since(start); d != 0 {
				t.Errorf("Accept returned %v (on the bubble's clock) after Close, want at once", d)
			}
			if n := len(failed); n != 0 {
				t.Errorf("%d more failed accepts after the first, want none", n)
			}
		})
	})
}

// osSyscallError stands for os.SyscallError without the os import's noise in the test.
type osSyscallError struct{ errno syscall.Errno }

func (e *osSyscallError) Error() string { return "accept4: " + e.errno.Error() }
func (e *osSyscallError) Unwrap() error { return e.errno }

// TestInflightLimit: a source with maxInflightPerSource queries waiting for the upstream gets
// SERVFAIL at once for the next; another source still gets through.
func TestInflightLimit(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	dials := 0
	blocked := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dials++
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("upstream down")
	}
	s, err := New(Config{Timeout: 10 * time.Second}, Dialers{Proxy: blocked}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range maxInflightPerSource {
		wg.Go(func() { s.HandleFrom(ctx, srcFlood, query(fmt.Sprintf("t%d.example.", i), mdns.TypeTXT)) })
	}
	waitFor(t, func() bool {
		s.inflight.mu.Lock()
		defer s.inflight.mu.Unlock()
		return s.inflight.n == maxInflightPerSource
	})
	start := time.Now()
	q := query("over.example.", mdns.TypeTXT)
	check(t, q, s.HandleFrom(ctx, srcFlood, q), want{rcode: mdns.RcodeServerFailure})
	if d := time.Since(start); d > time.Second {
		t.Errorf("over-limit query took %v, want an immediate SERVFAIL", d)
	}
	wg.Go(func() { s.HandleFrom(ctx, srcVM, query("vm.example.", mdns.TypeTXT)) })
	waitFor(t, func() bool {
		s.inflight.mu.Lock()
		defer s.inflight.mu.Unlock()
		return s.inflight.n == maxInflightPerSource+1
	})
	close(release)
	wg.Wait()
	if s.inflight.n != 0 || len(s.inflight.by) != 0 {
		t.Errorf("gate holds %d (%d sources) after all returned", s.inflight.n, len(s.inflight.by))
	}
	t.Run("in all", func(t *testing.T) {
		g := newGate(2, 3)
		a, b, c := sourceKey{app: "a"}, sourceKey{app: "b"}, sourceKey{app: "c"}
		for _, step := range []struct {
			k    sourceKey
			want bool
		}{{a, true}, {a, true}, {a, false}, {b, true}, {c, false}} {
			if got := g.enter(step.k); got != step.want {
				t.Errorf("enter(%v) = %v, want %v", step.k, got, step.want)
			}
		}
		g.leave(a)
		if !g.enter(c) {
			t.Error("enter(c) after a leave = false")
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	wait.For(t, "the condition", 10*time.Second, cond)
}

// recorder is a slog.Handler that keeps the records.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		var b strings.Builder
		b.WriteString(rec.Level.String() + " " + rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// TestSummaryLog: a flood of refused queries from several sources makes one log line per
// interval, with the counts, an example and the top source; an interval without any makes
// none; Close flushes. It runs on synctest's fake clock: the flood takes no time on it, and
// the intervals are exact.
func TestSummaryLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		s, err := New(Config{SummaryEvery: 300 * time.Millisecond, Pool: netip.MustParsePrefix("198.18.0.0/24")},
			Dialers{}, slog.New(rec))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := range 10_000 {
			src := srcFlood
			if i%100 == 0 {
				src = srcVM
			}
			s.HandleFrom(ctx, src, query(fmt.Sprintf("127.0.%d.%d.", i/256%256, i%256), mdns.TypeA))
		}
		for i := range 300 { // 46 recycled early on the /24
			s.HandleFrom(ctx, srcFlood, query(fmt.Sprintf("r%d.example.", i), mdns.TypeA))
		}
		lines := func(at time.Duration) []string {
			time.Sleep(at) // not ordering: moves the bubble's fake clock; synctest.Wait orders
			synctest.Wait()
			return rec.lines()
		}
		if got := lines(299 * time.Millisecond); len(got) != 0 {
			t.Fatalf("a line before the interval ended: %q", got)
		}
		got := lines(time.Millisecond)
		if len(got) != 1 {
			t.Fatalf("%d log lines, want 1:\n%s", len(got), strings.Join(got, "\n"))
		}
		for _, want := range []string{"WARN", "ip_literal=10000", "ip_literal_example=", "recycled_early=46",
			"sources=2", "top_source=10.0.2.66", "top_source_events=9946"} {
			if !strings.Contains(got[0], want) {
				t.Errorf("summary %q lacks %q", got[0], want)
			}
		}
		if got := lines(time.Second); len(got) != 1 {
			t.Errorf("quiet intervals logged: %q", got[1:])
		}
		s.HandleFrom(ctx, srcVM, query("::1.", mdns.TypeA))
		if got := lines(300 * time.Millisecond); len(got) != 2 || !strings.Contains(got[1], "ip_literal=1 ") {
			t.Errorf("an interval later: %q, want a second line with one literal", got)
		}
		s.HandleFrom(ctx, srcVM, query("::2.", mdns.TypeA))
		s.Close()
		if got := rec.lines(); len(got) != 3 || !strings.Contains(got[2], "ip_literal=1 ") {
			t.Errorf("after Close: %q, want a third line with one literal", got)
		}
	})
}
