package dns

import (
	"context"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/rules/refusal"
)

// fakeWalls cages the sources of 10.0.2.0/24 and refuses 127.0.0.0/8 and 10.0.4.0/24.
type fakeWalls struct{}

func (fakeWalls) Caged(src Source) bool {
	return netip.MustParsePrefix("10.0.2.0/24").Contains(src.Addr)
}

func (fakeWalls) Refused(a netip.Addr) (refusal.Reason, bool) {
	switch {
	case a.IsLoopback():
		return refusal.Host, true
	case netip.MustParsePrefix("10.0.4.0/24").Contains(a):
		return refusal.ToGuest, true
	}
	return 0, false
}

// TestAnswersWalled: in proxy mode a caged client is never told an address the host walls
// refuse it on every port; the other records stay, the query is counted under the walls'
// reason, and a client that is not caged gets the whole answer.
func TestAnswersWalled(t *testing.T) {
	zone := map[string][]string{
		"home.example A":  {"home.example. 300 IN A 127.0.0.1", "home.example. 300 IN A 192.0.2.10"},
		"guest.example A": {"guest.example. 300 IN CNAME g.example.", "g.example. 300 IN A 10.0.4.15"},
	}
	z := newZone(t, zone)
	up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: startTCP(t, z)}
	book := new(refusal.Book)
	s, err := New(Config{Mode: ModeProxy, Resolver: resolverAddr, Now: newClock().Now},
		Dialers{Proxy: up.dial, Direct: failDial(t, "direct"), Refusals: book, Walls: fakeWalls{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	guest := Source{Addr: netip.MustParseAddr("10.0.2.15")}
	host := Source{Addr: netip.MustParseAddr("192.168.1.10")}
	ctx := context.Background()
	for _, tc := range []struct {
		src  Source
		name string
		want want
	}{
		{guest, "home.example.", want{answer: []string{"home.example. 300 IN A 192.0.2.10"}}},
		{guest, "guest.example.", want{answer: []string{"guest.example. 300 IN CNAME g.example."}}},
		{host, "home.example.", want{answer: []string{"home.example. 300 IN A 127.0.0.1", "home.example. 300 IN A 192.0.2.10"}}},
	} {
		q := query(tc.name, mdns.TypeA)
		check(t, q, s.HandleFrom(ctx, tc.src, q), tc.want)
	}
	if h, g := book.Count(refusal.Host), book.Count(refusal.ToGuest); h != 1 || g != 1 {
		t.Errorf("refusals: %d host-off-limits, %d to-guest; want one each", h, g)
	}
}
