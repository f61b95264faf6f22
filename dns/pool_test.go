package dns

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/internal/clock/clocktest"
)

// smallPool is a fake-IP server on a /24 (254 addresses) with linger 10 min and TTL 10 s.
func smallPool(t *testing.T, c *clocktest.Clock) *Server {
	t.Helper()
	return newFakeIP(t, Config{Pool: netip.MustParsePrefix("198.18.7.0/24"), Linger: 10 * time.Minute, Now: c.Now})
}

// resolveA asks s for name's A record and returns the address, or the rcode as an error.
func resolveA(t *testing.T, s *Server, name string) (netip.Addr, error) {
	t.Helper()
	r := s.Handle(context.Background(), query(name+".", mdns.TypeA))
	if r.Rcode != mdns.RcodeSuccess {
		return netip.Addr{}, fmt.Errorf("rcode %s", mdns.RcodeToString[r.Rcode])
	}
	if len(r.Answer) != 1 {
		t.Fatalf("%s: %d answers, want 1", name, len(r.Answer))
	}
	a, _ := netip.AddrFromSlice(r.Answer[0].(*mdns.A).A)
	return a.Unmap(), nil
}

func mustA(t *testing.T, s *Server, name string) netip.Addr {
	t.Helper()
	a, err := resolveA(t, s, name)
	if err != nil {
		t.Fatalf("A %s: %v", name, err)
	}
	return a
}

// fill hands out every address of the /24 to n0 ... n253 and returns the addresses.
func fill(t *testing.T, s *Server) []netip.Addr {
	t.Helper()
	var addrs []netip.Addr
	for i := range 254 {
		addrs = append(addrs, mustA(t, s, fmt.Sprintf("n%d.example", i)))
	}
	return addrs
}

func TestPoolAllocation(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	addrs := fill(t, s)
	t.Run("sequential, skipping network and broadcast", func(t *testing.T) {
		if got, want := addrs[0], netip.MustParseAddr("198.18.7.1"); got != want {
			t.Errorf("first = %v, want %v", got, want)
		}
		if got, want := addrs[253], netip.MustParseAddr("198.18.7.254"); got != want {
			t.Errorf("last = %v, want %v", got, want)
		}
		seen := map[netip.Addr]bool{}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("address %v handed out twice", a)
			}
			seen[a] = true
		}
	})
	t.Run("stable per name", func(t *testing.T) {
		if got := mustA(t, s, "N17.Example"); got != addrs[17] {
			t.Errorf("A n17 = %v, want %v", got, addrs[17])
		}
	})
	t.Run("stats", func(t *testing.T) {
		st, ok := s.PoolStats()
		want := PoolStats{Prefix: netip.MustParsePrefix("198.18.7.0/24"), Size: 254, Mapped: 254, InUse: 0, Sources: 1}
		if !ok || st != want {
			t.Errorf("PoolStats = %+v, %v; want %+v, true", st, ok, want)
		}
	})
	t.Run("full within linger, the lone source's least recently used name gives way", func(t *testing.T) {
		c.Advance(10 * time.Minute) // exactly linger: still reserved
		if got := mustA(t, s, "new.example"); got != addrs[0] {
			t.Fatalf("A new = %v, want %v (n0's, the least recently used)", got, addrs[0])
		}
		if got, _ := s.NameFor(addrs[0]); got != "new.example" {
			t.Errorf("NameFor(%v) = %q, want new.example", addrs[0], got)
		}
		for i, a := range addrs[1:] {
			if got, ok := s.NameFor(a); !ok || got != fmt.Sprintf("n%d.example", i+1) {
				t.Fatalf("NameFor(%v) = %q, %v; want n%d.example", a, got, ok, i+1)
			}
		}
		if st, _ := s.PoolStats(); st.Recycled != 1 || st.Refused != 0 || st.Mapped != 254 {
			t.Errorf("PoolStats = %+v, want 1 recycled, 0 refused, 254 mapped", st)
		}
	})
	t.Run("InPool", func(t *testing.T) {
		for addr, want := range map[string]bool{"198.18.7.0": true, "198.18.7.9": true, "198.18.8.1": false, "10.0.2.2": false, "::1": false} {
			if got := s.InPool(netip.MustParseAddr(addr)); got != want {
				t.Errorf("InPool(%s) = %v, want %v", addr, got, want)
			}
		}
	})
}

func TestPoolLRUReuse(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	addrs := fill(t, s)
	c.Advance(time.Minute)
	mustA(t, s, "n0.example") // touched: n1 is now the least recently used
	name2, release2, ok := s.Acquire(addrs[2])
	if !ok || name2 != "n2.example" {
		t.Fatalf("Acquire(%v) = %q, %v; want n2.example, true", addrs[2], name2, ok)
	}
	c.Advance(10 * time.Minute) // n1..n253 idle for 11 min, n0 for 10 min

	t.Run("reuses the least recently used", func(t *testing.T) {
		if got := mustA(t, s, "fresh1.example"); got != addrs[1] {
			t.Errorf("A fresh1 = %v, want %v (n1's)", got, addrs[1])
		}
		if got, _ := s.NameFor(addrs[1]); got != "fresh1.example" {
			t.Errorf("NameFor(%v) = %q, want fresh1.example", addrs[1], got)
		}
	})
	t.Run("skips an address in use", func(t *testing.T) {
		if got := mustA(t, s, "fresh2.example"); got != addrs[3] {
			t.Errorf("A fresh2 = %v, want %v (n3's; n2's is in use)", got, addrs[3])
		}
		if got, _ := s.NameFor(addrs[2]); got != "n2.example" {
			t.Errorf("NameFor(%v) = %q, want n2.example", addrs[2], got)
		}
	})
	t.Run("an evicted name gets a new address", func(t *testing.T) {
		if got := mustA(t, s, "n1.example"); got != addrs[4] {
			t.Errorf("A n1 = %v, want %v", got, addrs[4])
		}
	})
	t.Run("release is idempotent and restarts the linger", func(t *testing.T) {
		release2()
		release2()
		if st, _ := s.PoolStats(); st.InUse != 0 {
			t.Errorf("InUse = %d after release, want 0", st.InUse)
		}
		// n2 was released now, so it is the most recent; the next reuse takes n5.
		if got := mustA(t, s, "fresh3.example"); got != addrs[5] {
			t.Errorf("A fresh3 = %v, want %v", got, addrs[5])
		}
	})
}

func TestPoolAllInUse(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	addrs := fill(t, s)
	var releases []func()
	for _, a := range addrs {
		_, rel, ok := s.Acquire(a)
		if !ok {
			t.Fatalf("Acquire(%v) failed", a)
		}
		releases = append(releases, rel)
	}
	// A second flow to the same address.
	_, extra, _ := s.Acquire(addrs[0])
	if st, _ := s.PoolStats(); st.InUse != 254 {
		t.Errorf("InUse = %d, want 254", st.InUse)
	}
	c.Advance(24 * time.Hour)
	if a, err := resolveA(t, s, "new.example"); err == nil {
		t.Fatalf("A new = %v with every address in use, want SERVFAIL", a)
	}
	releases[0]()
	if a, err := resolveA(t, s, "new.example"); err == nil {
		t.Fatalf("A new = %v with addrs[0] still held by a second flow, want SERVFAIL", a)
	}
	extra()
	c.Advance(10*time.Minute + time.Second)
	if got := mustA(t, s, "new.example"); got != addrs[0] {
		t.Errorf("A new = %v, want %v (the only released one)", got, addrs[0])
	}
	for _, rel := range releases {
		rel()
	}
}

func TestAcquireUnknown(t *testing.T) {
	s := smallPool(t, newClock())
	mustA(t, s, "one.example")
	for _, addr := range []string{"198.18.7.2", "198.18.7.0", "198.18.7.255", "192.0.2.1", "::1"} {
		if name, rel, ok := s.Acquire(netip.MustParseAddr(addr)); ok || rel != nil {
			t.Errorf("Acquire(%s) = %q, %v; want not ok and nil release", addr, name, ok)
		}
	}
	p, err := New(Config{Mode: ModeProxy}, Dialers{Proxy: failDial(t, "proxy")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := p.Acquire(netip.MustParseAddr("198.18.0.1")); ok {
		t.Error("Acquire in proxy mode ok, want false")
	}
	if p.InPool(netip.MustParseAddr("198.18.0.1")) {
		t.Error("InPool in proxy mode true, want false")
	}
	if _, ok := p.PoolStats(); ok {
		t.Error("PoolStats in proxy mode ok, want false")
	}
}

// TestPoolConcurrent runs assignments, acquires and releases at once (for -race) and then
// checks that no address stands for two names.
func TestPoolConcurrent(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				name := fmt.Sprintf("w%d-%d.example", w, i%300)
				r := s.Handle(context.Background(), query(name+".", mdns.TypeA))
				if r.Rcode == mdns.RcodeSuccess {
					a, _ := netip.AddrFromSlice(r.Answer[0].(*mdns.A).A)
					if _, rel, ok := s.Acquire(a.Unmap()); ok {
						rel()
					}
				}
				if i%50 == 0 {
					c.Advance(time.Minute)
				}
			}
		})
	}
	wg.Wait()
	st, _ := s.PoolStats()
	if st.InUse != 0 || st.Mapped != 254 {
		t.Errorf("stats %+v, want InUse 0 and Mapped 254", st)
	}
	names := map[string]netip.Addr{}
	for i := range 254 {
		a := netip.AddrFrom4([4]byte{198, 18, 7, byte(i + 1)})
		n, ok := s.NameFor(a)
		if !ok {
			t.Fatalf("NameFor(%v) unknown", a)
		}
		if prev, dup := names[n]; dup {
			t.Fatalf("name %s on %v and %v", n, prev, a)
		}
		names[n] = a
	}
}
