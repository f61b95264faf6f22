package dns

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules"
)

// silentZone answers names under ok.test with an A record and never answers the others
// (a name whose authoritative servers do not answer): the relayed query holds its upstream
// connection until the server's timeout.
type silentZone struct{}

func (silentZone) ServeDNS(w mdns.ResponseWriter, r *mdns.Msg) {
	if !strings.HasSuffix(canonical(r.Question[0].Name), "ok.test") {
		return // no answer; miekg closes nothing, the client times out
	}
	m := new(mdns.Msg)
	m.SetReply(r)
	rr, _ := mdns.NewRR(r.Question[0].Name + " 60 IN A 192.0.2.1")
	m.Answer = []mdns.RR{rr}
	w.WriteMsg(m)
}

// TestGuestUnansweredNamesDoNotDelayOthers: one guest (a VM network, asking from many of its
// addresses) sends 20 queries a second for names that never resolve, for 3 s; four other
// guests' queries meanwhile are answered without waiting for the flood: p99 under 100 ms.
// Before, the flood held every upstream connection for the whole timeout and the others'
// queries timed out.
func TestGuestUnansweredNamesDoNotDelayOthers(t *testing.T) {
	guests := []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("10.0.3.0/24"),
		netip.MustParsePrefix("10.0.4.0/24"), netip.MustParsePrefix("10.0.5.0/24"), netip.MustParsePrefix("10.0.6.0/24")}
	up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: startTCP(t, silentZone{})}
	s, err := New(Config{Mode: ModeProxy, Resolver: resolverAddr, Timeout: 2 * time.Second, Guests: guests},
		Dialers{Proxy: up.dial, Direct: failDial(t, "direct")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	ctx, stop := context.WithCancel(context.Background())
	var flood sync.WaitGroup
	flood.Go(func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			src := Source{Addr: netip.AddrFrom4([4]byte{10, 0, 2, byte(10 + i%200)})}
			flood.Go(func() { s.HandleFrom(context.Background(), src, query(fmt.Sprintf("n%d.never.test.", i), mdns.TypeA)) })
			select {
			case <-tk.C:
			case <-ctx.Done():
			}
		}
	})
	// The flood holds what it can: its share of the upstream's connections, each dialled
	// for one of its unanswered queries.
	wait.For(t, "the flood holding its share of the upstream", 10*time.Second, func() bool {
		return up.count() >= maxUpstreamConns-upstreamHeadroom
	})

	var mu sync.Mutex
	var delays []time.Duration
	var others sync.WaitGroup
	for g := 1; g < len(guests); g++ {
		others.Go(func() {
			src := Source{Addr: guests[g].Addr().Next()}
			for i := range 25 {
				start := time.Now()
				r := s.HandleFrom(context.Background(), src, query(fmt.Sprintf("q%d-%d.ok.test.", g, i), mdns.TypeA))
				d := time.Since(start)
				if r.Rcode != mdns.RcodeSuccess {
					d = time.Hour // failed: worse than any delay
				}
				mu.Lock()
				delays = append(delays, d)
				mu.Unlock()
				time.Sleep(100 * time.Millisecond) // not ordering: each guest's queries paced at 10 a second
			}
		})
	}
	others.Wait()
	stop()
	flood.Wait()
	slices.Sort(delays)
	p50, p99 := delays[len(delays)/2], delays[len(delays)*99/100]
	t.Logf("4 guests, %d queries beside a flood of unanswered names: p50 %v, p99 %v, max %v", len(delays), p50, p99, delays[len(delays)-1])
	if p99 > 100*time.Millisecond {
		t.Errorf("p99 %v; want at most 100 ms", p99)
	}
}

// TestKeyOfGuest: a client inside a guest network is budgeted as that network (its fake-IP
// addresses, queries and upstream connections), whichever of its addresses it asks from;
// one outside is budgeted by its address (/64 for IPv6), its app kept.
func TestKeyOfGuest(t *testing.T) {
	s, err := New(Config{Mode: ModeFakeIP, Guests: []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00:2::/64")}}, Dialers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Source{Addr: netip.MustParseAddr("10.0.2.15")}, "10.0.2.0/24"},
		{Source{Addr: netip.MustParseAddr("10.0.2.200")}, "10.0.2.0/24"},
		{Source{Addr: netip.MustParseAddr("fd00:2::99")}, "fd00:2::/64"},
		{Source{Addr: netip.MustParseAddr("10.0.3.7")}, "10.0.3.7"},
		{Source{Addr: netip.MustParseAddr("10.0.2.9"), Owner: rules.Owner{App: "Qemu.exe"}}, "qemu.exe@10.0.2.0/24"},
	} {
		if got := s.keyOf(tc.src).String(); got != tc.want {
			t.Errorf("keyOf(%v) = %s; want %s", tc.src, got, tc.want)
		}
	}
}
