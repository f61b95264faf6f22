package upstream_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/upstreamtest"
)

// switchable is a fake upstream whose outcome the test sets: nil succeeds
// after 1ms; "block" waits for the context to end.
type switchable struct {
	*upstreamtest.Fake
	mu  sync.Mutex
	err error
}

var errBlock = errors.New("block")

func newSwitchable(name string) *switchable {
	s := &switchable{}
	s.Fake = &upstreamtest.Fake{ID: name, ConnectFunc: func(ctx context.Context, _ upstream.Addr, _ []byte) (net.Conn, error) {
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		if err == errBlock {
			<-ctx.Done()
			return nil, &upstream.Error{Upstream: name, Op: "connect", Dst: dst, Err: ctx.Err()}
		}
		time.Sleep(time.Millisecond) // not ordering: a connect that takes 1 ms of the bubble's fake clock
		if err != nil {
			return nil, err
		}
		return nopConn{}, nil
	}}
	s.AssociateFunc = func(ctx context.Context) (upstream.Association, error) {
		if _, err := s.ConnectFunc(ctx, upstream.Addr{}, nil); err != nil {
			return nil, err
		}
		return upstreamtest.NewAssociation(), nil
	}
	return s
}

func (s *switchable) set(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func newGroup(t *testing.T, ups ...*switchable) (*upstream.Group, []*upstream.Tracked) {
	t.Helper()
	var trs []*upstream.Tracked
	for _, u := range ups {
		trs = append(trs, mustTrack(t, u, upstream.HealthConfig{Backoff: time.Second, MaxBackoff: 8 * time.Second}))
	}
	g, err := upstream.NewGroup(trs...)
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	return g, trs
}

// via connects through g with a 10s deadline and returns the member used,
// or "error: ..." .
func via(g *upstream.Group) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, name, err := g.ConnectVia(ctx, dst, []byte("early"))
	if err != nil {
		return "error: " + err.Error()
	}
	return name
}

func TestGroupFailoverAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary, backup := newSwitchable("primary"), newSwitchable("backup")
		g, trs := newGroup(t, primary, backup)
		if g.Name() != "primary,backup" {
			t.Errorf("name %q", g.Name())
		}
		if got := via(g); got != "primary" {
			t.Fatalf("healthy: via %s, want primary", got)
		}
		primary.set(upstreamtest.Failure("primary", false))
		if got := via(g); got != "backup" {
			t.Fatalf("primary failing: via %s, want backup", got)
		}
		if s := trs[0].Status(); s.State != upstream.Down {
			t.Errorf("primary %v, want down", s.State)
		}
		// In its backoff the primary is not tried first.
		before := primary.Connects()
		for range 3 {
			if got := via(g); got != "backup" {
				t.Errorf("in backoff: via %s, want backup", got)
			}
		}
		if primary.Connects() != before {
			t.Errorf("primary tried %d times in its backoff, want 0", primary.Connects()-before)
		}
		// The backoff over, the next flow tries the primary, still down:
		// it fails over again and the backoff doubles.
		time.Sleep(time.Second) // not ordering: the backoff passes on the bubble's fake clock
		if got := via(g); got != "backup" {
			t.Errorf("trial failed: via %s, want backup", got)
		}
		if s := trs[0].Status(); s.Failures != 2 || time.Until(s.RetryAt) < 1900*time.Millisecond {
			t.Errorf("after a failed trial: %+v, want 2 failures and a 2s backoff", s)
		}
		// The primary comes back: after the backoff, a trial finds it.
		primary.set(nil)
		time.Sleep(2 * time.Second) // not ordering: the backoff passes on the bubble's fake clock
		if got := via(g); got != "primary" {
			t.Errorf("primary back: via %s, want primary", got)
		}
		if got := via(g); got != "primary" {
			t.Errorf("primary up: via %s, want primary", got)
		}
		if s := trs[0].Status(); s.State != upstream.Up {
			t.Errorf("primary %v, want up", s.State)
		}
	})
}

func TestGroupAllDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSwitchable("a"), newSwitchable("b")
		g, _ := newGroup(t, a, b)
		a.set(upstreamtest.Failure("a", false))
		b.set(upstreamtest.Failure("b", false))
		for i := range 3 {
			got := via(g)
			if want := "error: upstream a: connect invalid AddrPort: fake: proxy down; upstream b: connect invalid AddrPort: fake: proxy down"; got != want {
				t.Errorf("flow %d: %s, want %s", i, got, want)
			}
		}
		// Both down: every flow still tries both, in order.
		if a.Connects() != 3 || b.Connects() != 3 {
			t.Errorf("tries a=%d b=%d, want 3 each", a.Connects(), b.Connects())
		}
		_, err := g.Connect(context.Background(), dst, nil)
		var ue *upstream.Error
		if !errors.As(err, &ue) || ue.Upstream != "a" {
			t.Errorf("errors.As finds %+v, want the first member's error", ue)
		}
		// b comes back: it is tried second (both are in backoff), and works.
		b.set(nil)
		if got := via(g); got != "b" {
			t.Errorf("via %s, want b", got)
		}
		// Now b is healthy and comes first.
		before := a.Connects()
		if got := via(g); got != "b" || a.Connects() != before {
			t.Errorf("via %s with %d tries of a, want b and none", got, a.Connects()-before)
		}
	})
}

func TestGroupStops(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"refused", upstreamtest.Failure("a", true)},
		{"sent", &upstream.Error{Upstream: "a", Op: "connect", Sent: true, Err: errors.New("reply cut short")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := newSwitchable("a"), newSwitchable("b")
				g, trs := newGroup(t, a, b)
				a.set(tt.err)
				if got := via(g); !strings.HasPrefix(got, "error: upstream a:") || strings.Contains(got, "upstream b") {
					t.Errorf("via %s, want a's error only", got)
				}
				if b.Connects() != 0 {
					t.Errorf("b tried %d times, want 0", b.Connects())
				}
				wantState := map[string]upstream.State{"refused": upstream.Up, "sent": upstream.Down}[tt.name]
				if s := trs[0].Status(); s.State != wantState {
					t.Errorf("a is %v, want %v", s.State, wantState)
				}
			})
		})
	}
}

// TestGroupDeadlineSplit: a member that black-holes the connection gets
// half of the flow's time, the next one the rest.
func TestGroupDeadlineSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := newSwitchable("a"), newSwitchable("b"), newSwitchable("c")
		g, trs := newGroup(t, a, b, c)
		a.set(errBlock)
		b.set(errBlock)
		c.set(errBlock)
		start := time.Now()
		got := via(g)
		if took := time.Since(start); took != 10*time.Second {
			t.Errorf("flow took %v, want its whole 10s", took)
		}
		for _, want := range []string{"upstream a: connect example.com:443: context deadline exceeded", "upstream c:"} {
			if !strings.Contains(got, want) {
				t.Errorf("error %q, want it to contain %q", got, want)
			}
		}
		// a had half the time, b half of the rest, c the rest.
		for i, want := range []time.Duration{5 * time.Second, 7500 * time.Millisecond, 10 * time.Second} {
			if s := trs[i].Status(); s.State != upstream.Down || s.LastErrorAt.Sub(start) != want {
				t.Errorf("%s: %v, failed at %v; want down at %v", s.Name, s.State, s.LastErrorAt.Sub(start), want)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		a, b := newSwitchable("a"), newSwitchable("b")
		g, _ := newGroup(t, a, b)
		a.set(errBlock)
		start := time.Now()
		if got := via(g); got != "b" {
			t.Errorf("via %s, want b", got)
		}
		if took := time.Since(start); took != 5*time.Second+time.Millisecond {
			t.Errorf("failover took %v, want 5s (half the flow's time) and b's 1ms", took)
		}
	})
}

// TestGroupCanceled: a flow canceled by its caller stops and counts
// nothing against the member.
func TestGroupCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSwitchable("a"), newSwitchable("b")
		g, trs := newGroup(t, a, b)
		a.set(errBlock)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		_, err := g.Connect(ctx, dst, nil)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
		if b.Connects() != 0 || trs[0].Status().State != upstream.Unknown {
			t.Errorf("b tried %d times, a is %v; want 0 and unknown", b.Connects(), trs[0].Status().State)
		}
	})
}

// TestGroupOneTrial: when the primary's backoff is over, one flow tries it
// while the others keep using the backup.
func TestGroupOneTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSwitchable("a"), newSwitchable("b")
		g, _ := newGroup(t, a, b)
		a.set(upstreamtest.Failure("a", false))
		if got := via(g); got != "b" {
			t.Fatalf("via %s", got)
		}
		a.set(errBlock) // the trial will hang
		// not ordering: the backoff passes on the bubble's fake clock
		time.Sleep(time.Second)
		trial := make(chan string)
		go func() { trial <- via(g) }()
		synctest.Wait() // the trial is waiting in a
		before := a.Connects()
		if got := via(g); got != "b" {
			t.Errorf("during the trial: via %s, want b", got)
		}
		if a.Connects() != before {
			t.Errorf("a second flow tried a during the trial")
		}
		if got := <-trial; got != "b" {
			t.Errorf("the trial ended via %s, want b after a's half of the time", got)
		}
	})
}

func TestGroupAssociate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSwitchable("a"), newSwitchable("b")
		g, _ := newGroup(t, a, b)
		a.set(upstreamtest.Failure("a", false))
		as, name, err := g.AssociateVia(context.Background())
		if err != nil || name != "b" {
			t.Fatalf("AssociateVia: %v, %s, %v", as, name, err)
		}
		as.Close()
		if a.Associates() != 1 || b.Associates() != 1 {
			t.Errorf("associates a=%d b=%d, want 1 each", a.Associates(), b.Associates())
		}
	})
}

func TestNewGroup(t *testing.T) {
	a := mustTrack(t, &upstreamtest.Fake{ID: "a"}, upstream.HealthConfig{})
	a2 := mustTrack(t, &upstreamtest.Fake{ID: "a"}, upstream.HealthConfig{})
	if _, err := upstream.NewGroup(); err == nil || err.Error() != "upstream group: no member" {
		t.Errorf("empty: %v", err)
	}
	for _, ms := range [][]*upstream.Tracked{{a, a}, {a, a2}} {
		if _, err := upstream.NewGroup(ms...); err == nil || err.Error() != "upstream group: a is listed twice" {
			t.Errorf("twice: %v", err)
		}
	}
	g, err := upstream.NewGroup(a)
	if err != nil || g.Name() != "a" || len(g.Members()) != 1 {
		t.Errorf("one member: %v, %v", g, err)
	}
}
