package dns

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

var (
	srcFlood = Source{Addr: netip.MustParseAddr("10.0.2.66")}
	srcVM    = Source{Addr: netip.MustParseAddr("10.0.3.15")}
	srcHost  = Source{Addr: netip.MustParseAddr("10.0.2.2")}
)

// resolveFrom asks s for name's A record as src and returns the address, or the rcode as an
// error.
func resolveFrom(t testing.TB, s *Server, src Source, name string) (netip.Addr, error) {
	t.Helper()
	r := s.HandleFrom(context.Background(), src, query(name+".", mdns.TypeA))
	if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
		return netip.Addr{}, fmt.Errorf("%s: rcode %s, %d answers", name, mdns.RcodeToString[r.Rcode], len(r.Answer))
	}
	a, _ := netip.AddrFromSlice(r.Answer[0].(*mdns.A).A)
	return a.Unmap(), nil
}

func mustFrom(t testing.TB, s *Server, src Source, name string) netip.Addr {
	t.Helper()
	a, err := resolveFrom(t, s, src, name)
	if err != nil {
		t.Fatalf("A %s from %v: %v", name, src.Addr, err)
	}
	return a
}

// checkInvariants checks the pool's bookkeeping from scratch.
func checkInvariants(t testing.TB, p *pool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if uint32(len(p.byOff)) != p.next || len(p.byName) != int(p.next) {
		t.Fatalf("next %d, byOff %d, byName %d", p.next, len(p.byOff), len(p.byName))
	}
	held := map[*owner]int{}
	idle, inUse := 0, 0
	for off, m := range p.byOff {
		if m.off != uint32(off) || p.byName[m.name] != m {
			t.Fatalf("mapping %d (%q) not indexed", off, m.name)
		}
		if IsIPLiteral(m.name) {
			t.Fatalf("literal %q mapped", m.name)
		}
		if m.refs < 0 {
			t.Fatalf("%q: refs %d", m.name, m.refs)
		}
		if m.refs == 0 {
			idle++
			if m.ln[lnAll].next == nil {
				t.Fatalf("idle %q not in the pool's idle list", m.name)
			}
			if m.owner.live() != (m.ln[lnOwner].next != nil) {
				t.Fatalf("idle %q: owner live %v, in an owner list %v", m.name, m.owner.live(), m.ln[lnOwner].next != nil)
			}
			if m.owner != nil && m.owner.gone {
				t.Fatalf("idle %q owned by a dropped source", m.name)
			}
		} else {
			inUse++
			if m.ln[lnAll].next != nil || m.ln[lnOwner].next != nil {
				t.Fatalf("in-use %q in an idle list", m.name)
			}
		}
		if m.owner.live() {
			held[m.owner]++
		}
	}
	if p.idle.n != idle || p.inUse != inUse {
		t.Fatalf("idle list %d / %d idle, inUse %d / %d", p.idle.n, idle, p.inUse, inUse)
	}
	var last time.Time
	n := 0
	for m := p.idle.front(); n < p.idle.n; m = m.ln[lnAll].next {
		if m.last.Before(last) {
			t.Fatalf("pool idle list out of order at %q", m.name)
		}
		last = m.last
		n++
	}
	if len(p.owners) > p.maxSources || p.active.Len() != len(p.owners) {
		t.Fatalf("%d owners (max %d), %d active", len(p.owners), p.maxSources, p.active.Len())
	}
	owners := []*owner{p.overflow}
	for _, o := range p.owners {
		owners = append(owners, o)
	}
	if len(p.heap) != len(owners) {
		t.Fatalf("heap %d, owners %d", len(p.heap), len(owners))
	}
	for i, o := range p.heap {
		if o.heapIdx != i || o.gone {
			t.Fatalf("heap[%d]: index %d gone %v", i, o.heapIdx, o.gone)
		}
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(p.heap) && p.heap[c].idle.n > o.idle.n {
				t.Fatalf("heap order broken at %d", i)
			}
		}
	}
	for _, o := range owners {
		if o.held != held[o] {
			t.Fatalf("%s: held %d, owns %d", o.label, o.held, held[o])
		}
		n := 0
		for m := o.idle.front(); n < o.idle.n; m = m.ln[lnOwner].next {
			if m.owner != o || m.refs != 0 {
				t.Fatalf("%s's idle list holds %q (owner %v, refs %d)", o.label, m.name, m.owner, m.refs)
			}
			n++
		}
	}
}

// TestPoolFairShares: on a full /24, a flooding source recycles its own names; other sources
// keep resolving and keep their names; in-use names and names another source asked for
// within linger are never taken early.
func TestPoolFairShares(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	for i := range 1000 {
		mustFrom(t, s, srcFlood, fmt.Sprintf("f%d.example", i))
	}
	if st, _ := s.PoolStats(); st.Mapped != 254 || st.Recycled != 1000-254 || st.Refused != 0 {
		t.Fatalf("after the first flood: %+v, want 254 mapped, 746 recycled, none refused", st)
	}
	mine := map[string]netip.Addr{}
	for i := range 50 {
		for _, src := range []Source{srcHost, srcVM} {
			name := fmt.Sprintf("%v-%d.example", src.Addr, i)
			mine[name] = mustFrom(t, s, src, name)
		}
	}
	// The flooder holds some addresses in use, and asks for one of the host's names.
	var held []netip.Addr
	var releases []func()
	for i := 990; i < 1000; i++ {
		a := mustFrom(t, s, srcFlood, fmt.Sprintf("f%d.example", i))
		_, rel, ok := s.Acquire(a)
		if !ok {
			t.Fatalf("Acquire(%v) failed", a)
		}
		held, releases = append(held, a), append(releases, rel)
	}
	stolen := fmt.Sprintf("%v-%d.example", srcHost.Addr, 7)
	if got := mustFrom(t, s, srcFlood, stolen); got != mine[stolen] {
		t.Fatalf("A %s from the flooder = %v, want the host's %v", stolen, got, mine[stolen])
	}
	for i := 1000; i < 5000; i++ {
		mustFrom(t, s, srcFlood, fmt.Sprintf("f%d.example", i))
		if i%500 == 0 {
			c.Advance(time.Second)
			checkInvariants(t, s.pool)
		}
	}
	for name, a := range mine {
		if got, ok := s.NameFor(a); !ok || got != name {
			t.Errorf("NameFor(%v) = %q, %v after the flood, want %q", a, got, ok, name)
		}
	}
	for i, a := range held {
		if got, _ := s.NameFor(a); got != fmt.Sprintf("f%d.example", 990+i) {
			t.Errorf("in-use %v now stands for %q", a, got)
		}
	}
	// Both others still get new names while the flooder goes on.
	for i := range 20 {
		mustFrom(t, s, srcFlood, fmt.Sprintf("g%d.example", i))
		mustFrom(t, s, srcVM, fmt.Sprintf("vm-new%d.example", i))
		mustFrom(t, s, srcHost, fmt.Sprintf("host-new%d.example", i))
	}
	for _, rel := range releases {
		rel()
	}
	checkInvariants(t, s.pool)
	st, _ := s.PoolStats()
	if st.Refused != 0 || st.Sources != 3 {
		t.Errorf("PoolStats = %+v, want none refused and 3 sources", st)
	}

	t.Run("the biggest holder pays, not the asker", func(t *testing.T) {
		// The VM holds 70 idle names, the flooder about 134: a new VM name takes one of the
		// flooder's, not one of the VM's own.
		before := map[string]netip.Addr{}
		for name, a := range mine {
			before[name] = a
		}
		mustFrom(t, s, srcVM, "one-more.example")
		for name, a := range before {
			if got, _ := s.NameFor(a); got != name {
				t.Errorf("NameFor(%v) = %q, want %q", a, got, name)
			}
		}
	})
	t.Run("every address in use is SERVFAIL for the asker only", func(t *testing.T) {
		var rels []func()
		for i := range 254 {
			_, rel, ok := s.Acquire(netip.AddrFrom4([4]byte{198, 18, 7, byte(i + 1)}))
			if !ok {
				t.Fatalf("Acquire %d failed", i)
			}
			rels = append(rels, rel)
		}
		if a, err := resolveFrom(t, s, srcVM, "none-left.example"); err == nil {
			t.Errorf("A with every address in use = %v, want SERVFAIL", a)
		}
		if st, _ := s.PoolStats(); st.Refused != 1 {
			t.Errorf("Refused = %d, want 1", st.Refused)
		}
		for _, rel := range rels {
			rel()
		}
		mustFrom(t, s, srcVM, "none-left.example")
		checkInvariants(t, s.pool)
	})
}

// TestPoolSourcesBounded: a flood of distinct sources (spoofed addresses) keeps at most
// maxSources budgets; later ones share the overflow budget; a source quiet for longer than
// linger gives its place up, and its names stay until reused past linger.
func TestPoolSourcesBounded(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	s.pool.maxSources = 4
	quiet := mustFrom(t, s, srcHost, "quiet.example")
	for i := range 100 {
		src := Source{Addr: netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})}
		mustFrom(t, s, src, fmt.Sprintf("spoof%d.example", i))
	}
	checkInvariants(t, s.pool)
	if st, _ := s.PoolStats(); st.Sources != 5 {
		t.Errorf("Sources = %d, want 4 and the overflow", st.Sources)
	}
	c.Advance(11 * time.Minute)
	for i := range 10 {
		src := Source{Addr: netip.AddrFrom4([4]byte{10, 8, 0, byte(i)})}
		mustFrom(t, s, src, fmt.Sprintf("late%d.example", i))
	}
	checkInvariants(t, s.pool)
	if got, ok := s.NameFor(quiet); !ok || got != "quiet.example" {
		t.Errorf("NameFor(%v) = %q, %v; want quiet.example", quiet, got, ok)
	}

	t.Run("IPv6 sources are kept by /64", func(t *testing.T) {
		s := smallPool(t, newClock())
		for i := range 50 {
			src := Source{Addr: netip.AddrFrom16([16]byte{0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 8), byte(i)})}
			mustFrom(t, s, src, fmt.Sprintf("v6-%d.example", i))
		}
		if st, _ := s.PoolStats(); st.Sources != 1 {
			t.Errorf("Sources = %d after 50 addresses of one /64, want 1", st.Sources)
		}
	})
}

// TestPoolRandomOps runs random queries, acquires, releases and clock steps from a few
// sources (more than the table holds) on a small pool, checking the bookkeeping and that an
// address in use never changes its name.
func TestPoolRandomOps(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			c := newClock()
			s := smallPool(t, c)
			s.pool.maxSources = 3
			type hold struct {
				addr netip.Addr
				name string
				rel  func()
			}
			var holds []hold
			for i := range 10_000 {
				src := Source{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(6))})}
				switch r := rng.IntN(100); {
				case r < 80:
					name := fmt.Sprintf("n%d.example", rng.IntN(700))
					a, err := resolveFrom(t, s, src, name)
					if err != nil {
						// Allowed only on a full pool (every address in use, or the biggest
						// holder's oldest names asked for by others within linger).
						if st, _ := s.PoolStats(); st.Mapped != st.Size {
							t.Fatalf("op %d: %v with %d of %d mapped", i, err, st.Mapped, st.Size)
						}
						continue
					}
					if got, _ := s.NameFor(a); got != name {
						t.Fatalf("op %d: %s got %v which stands for %q", i, name, a, got)
					}
				case r < 90 && len(holds) < 100:
					a := netip.AddrFrom4([4]byte{198, 18, 7, byte(1 + rng.IntN(254))})
					if name, rel, ok := s.Acquire(a); ok {
						holds = append(holds, hold{a, name, rel})
					}
				case r < 98:
					if len(holds) > 0 {
						j := rng.IntN(len(holds))
						holds[j].rel()
						holds = append(holds[:j], holds[j+1:]...)
					}
				default:
					c.Advance(time.Duration(rng.IntN(180)) * time.Second)
				}
				for _, h := range holds {
					if got, _ := s.NameFor(h.addr); got != h.name {
						t.Fatalf("op %d: in-use %v changed from %q to %q", i, h.addr, h.name, got)
					}
				}
				if i%97 == 0 {
					checkInvariants(t, s.pool)
				}
			}
			for _, h := range holds {
				h.rel()
			}
			checkInvariants(t, s.pool)
		})
	}
}

// TestPoolFlood: one source asks for 200,000 distinct names on the default pool (131,070
// addresses); another VM and the host resolve throughout, and memory and time stay bounded.
// Before per-source shares, the pool was exhausted after 131,070 names and everyone, the
// host included, got SERVFAIL for linger (10 minutes).
func TestPoolFlood(t *testing.T) {
	c := newClock()
	s := newFakeIP(t, Config{Now: c.Now})
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	start := time.Now()
	const flood = 200_000
	others := map[string]netip.Addr{}
	for i := range flood {
		if _, err := resolveFrom(t, s, srcFlood, fmt.Sprintf("n%d.flood.example", i)); err != nil {
			t.Fatalf("flooder, name %d: %v", i, err)
		}
		if i%1000 == 0 {
			vm, host := fmt.Sprintf("vm%d.example", i), fmt.Sprintf("host%d.example", i)
			others[vm] = mustFrom(t, s, srcVM, vm)
			others[host] = mustFrom(t, s, srcHost, host)
			c.Advance(10 * time.Millisecond) // 200,000 names in 2 s of the clock: all within linger
		}
	}
	took := time.Since(start)
	for name, a := range others {
		if got, _ := s.NameFor(a); got != name {
			t.Fatalf("%s lost its address %v to the flood (now %q)", name, a, got)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grew := int64(ms.HeapAlloc) - int64(heap0)
	st, _ := s.PoolStats()
	t.Logf("%d names from one source in %v (%.0f/s); heap grew %d MiB; %+v",
		flood, took.Round(time.Millisecond), flood/took.Seconds(), grew>>20, st)
	if st.Refused != 0 || st.Mapped != st.Size || st.Recycled < flood-uint64(st.Size) {
		t.Errorf("PoolStats = %+v", st)
	}
	if grew > 128<<20 {
		t.Errorf("heap grew %d MiB, want under 128 MiB", grew>>20)
	}
	if took > 2*time.Minute {
		t.Errorf("took %v, want well under 2 minutes", took)
	}
	runtime.KeepAlive(s)
}

// TestServeSources: Serve accounts each query to its client's address, over UDP and TCP; a
// flood from one loopback address leaves another resolving.
func TestServeSources(t *testing.T) {
	c := newClock()
	s := smallPool(t, c)
	udpAddr, tcpAddr, _ := serve(t, s)
	client := func(local, network string) *mdns.Conn {
		var la net.Addr = &net.UDPAddr{IP: net.ParseIP(local)}
		if network == "tcp" {
			la = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		addr := udpAddr
		if network == "tcp" {
			addr = tcpAddr
		}
		d := net.Dialer{LocalAddr: la, Timeout: 5 * time.Second}
		conn, err := d.Dial(network, addr)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", network, local, err)
		}
		t.Cleanup(func() { conn.Close() })
		return &mdns.Conn{Conn: conn}
	}
	flood := client("127.0.0.1", "udp")
	for i := range 1000 {
		if err := ask(flood, fmt.Sprintf("f%d.example.", i)); err != nil {
			t.Fatalf("flood query %d: %v", i, err)
		}
	}
	other := map[string]netip.Addr{}
	for _, network := range []string{"udp", "tcp"} {
		conn := client("127.0.0.2", network)
		for i := range 20 {
			name := fmt.Sprintf("%s%d.example", network, i)
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			if err := conn.WriteMsg(query(name+".", mdns.TypeA)); err != nil {
				t.Fatal(err)
			}
			r, err := conn.ReadMsg()
			if err != nil || r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s from 127.0.0.2: %v %v", name, err, r)
			}
			a, _ := netip.AddrFromSlice(r.Answer[0].(*mdns.A).A)
			other[name] = a
		}
	}
	for i := range 1000 {
		if err := ask(flood, fmt.Sprintf("g%d.example.", i)); err != nil {
			t.Fatalf("second flood, query %d: %v", i, err)
		}
	}
	for name, a := range other {
		if got, _ := s.NameFor(a); got != name {
			t.Errorf("NameFor(%v) = %q, want %q", a, got, name)
		}
	}
	if st, _ := s.PoolStats(); st.Sources != 2 || st.Refused != 0 {
		t.Errorf("PoolStats = %+v, want 2 sources and none refused", st)
	}
}

// TestHandleWireFrom: the wire entry point with a source counts against that source; the old
// one against the unknown source.
func TestHandleWireFrom(t *testing.T) {
	s := smallPool(t, newClock())
	wire := func(name string) []byte {
		b, err := query(name, mdns.TypeA).Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	for i := range 300 {
		if s.HandleWireFrom(ctx, srcFlood, wire(fmt.Sprintf("f%d.example.", i)), true) == nil {
			t.Fatal("no reply")
		}
	}
	out := s.HandleWire(ctx, wire("unknown.example."), true)
	r := new(mdns.Msg)
	if err := r.Unpack(out); err != nil || r.Rcode != mdns.RcodeSuccess {
		t.Fatalf("reply %v, %v", r, err)
	}
	if st, _ := s.PoolStats(); st.Sources != 2 {
		t.Errorf("Sources = %d, want the flooder and the unknown source", st.Sources)
	}
	a, _ := netip.AddrFromSlice(r.Answer[0].(*mdns.A).A)
	if got, _ := s.NameFor(a.Unmap()); got != "unknown.example" {
		t.Errorf("NameFor = %q", got)
	}
}
