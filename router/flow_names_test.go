package router

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestResolvedCases: the relay looks a caged flow's name up when the policy asks, and
// decides the shared resolved cases as the policy does.
func TestResolvedCases(t *testing.T) {
	env := policytest.Env()
	env.Scoped = false // the rules decide every flow handed over (local = false leaves the host's own out)
	dec := casePolicy(t, "local-proxy.toml", policytest.LocalProxyConfig, env)
	target := startTarget(t, "ok\n")
	hosts := map[string]netip.Addr{}
	for _, c := range policytest.ResolvedCases() {
		hosts[c.Flow.Host] = target.Addr()
	}
	p := startProxy(t, hosts, nil) // it dials loopback only: no case's traffic leaves
	for _, c := range policytest.ResolvedCases() {
		t.Run(c.Name, func(t *testing.T) {
			fl := c.Flow
			names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{fl.Dst: fl.Host},
				Resolved: map[string][]netip.Addr{fl.Host: fl.Resolved}}
			opts := caseOptions(fl, netip.AddrPortFrom(fl.Dst, fl.Port), names)
			pol := Settings{Decision: dec, Upstreams: []UpstreamConfig{
				{Config: upstream.Config{Name: "local", Host: "127.0.0.1", Port: p.Addr.Port()}},
				{Config: upstream.Config{Name: "remote", Host: "127.0.0.1", Port: p.Addr.Port()}},
			}}
			e := newEnv(t, pol, opts)
			e.wantDecided(c.Action, c.Rule)
			// A caged flow's name is looked up once, in classify (dialDirect reuses the
			// checked addresses); a host app's direct fake IP is resolved by dialDirect.
			want := int32(0)
			if c.NeedsResolve || c.Action == rules.Direct {
				want = 1
			}
			if n := int32(len(names.Lookups())); n != want {
				t.Errorf("%d lookups of the name, want %d", n, want)
			}
		})
	}
}

// TestNameLookedUpOncePerName: many flows to one name at once cost one lookup, and the
// answer is kept for the next flows.
func TestNameLookedUpOncePerName(t *testing.T) {
	// In a bubble: the lookups of loop.example and slow.example wait until the test lets
	// them answer, and synctest.Wait says when every asker waits.
	synctest.Test(t, func(t *testing.T) {
		c := newResolvedNames(nil)
		var calls atomic.Int32
		answer := map[string]chan struct{}{"loop.example": make(chan struct{}), "slow.example": make(chan struct{})}
		c.resolve = func(ctx context.Context, name string) ([]netip.Addr, error) {
			calls.Add(1)
			if ch := answer[name]; ch != nil {
				<-ch
			}
			if name == "bad.example" {
				return nil, errors.New("refused")
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if got := c.lookup(context.Background(), "loop.example"); len(got) != 1 {
					t.Errorf("lookup = %v", got)
				}
			})
		}
		synctest.Wait() // all 50 wait on the lookup under way
		close(answer["loop.example"])
		wg.Wait()
		c.lookup(context.Background(), "loop.example")
		if n := calls.Load(); n != 1 {
			t.Errorf("%d lookups for one name, want 1", n)
		}
		if got := c.lookup(context.Background(), "bad.example"); got == nil || len(got) != 0 {
			t.Errorf("failed lookup = %#v, want empty and not nil", got)
		}
		// An asker whose time runs out gets nothing, and the lookup goes on for the others.
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if got := c.lookup(ctx, "slow.example"); len(got) != 0 {
			t.Errorf("lookup past its deadline = %v", got)
		}
		close(answer["slow.example"])
		if got := c.lookup(context.Background(), "slow.example"); len(got) != 1 {
			t.Errorf("lookup after another asker gave up = %v", got)
		}
		// Expiry: a minute later the name is looked up again.
		base := time.Now()
		c.now = func() time.Time { return base.Add(2 * nameTTL) }
		c.lookup(context.Background(), "loop.example")
		if n := calls.Load(); n != 4 {
			t.Errorf("%d lookups after expiry, want 4", n)
		}
	})
}

func TestResolvedNamesBounded(t *testing.T) {
	c := newResolvedNames(func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("203.0.113.5")}, nil
	})
	for i := range maxNames + 100 {
		c.lookup(context.Background(), fmt.Sprintf("n%d.example", i))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > maxNames {
		t.Errorf("%d names kept, want at most %d", len(c.m), maxNames)
	}
}
