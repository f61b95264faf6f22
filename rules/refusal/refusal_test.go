package refusal_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/rules/refusal"
)

func dst(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), port)
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range refusal.All() {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("reason %d: name %q empty, unknown or twice", r, s)
		}
		seen[s] = true
		if p, ok := refusal.Parse(s); !ok || p != r {
			t.Errorf("Parse(%q) = %v, %v", s, p, ok)
		}
	}
	if _, ok := refusal.Parse("nope"); ok {
		t.Error("Parse accepted an unknown name")
	}
}

func TestRingKeepsTheLatest(t *testing.T) {
	var b refusal.Book
	base := time.Unix(1000, 0)
	for i := range refusal.RingSize + 5 {
		b.Add(refusal.GuestUDP, refusal.Event{At: base.Add(time.Duration(i) * time.Second), Dst: dst(uint16(1000 + i))})
	}
	b.Add(refusal.Rule, refusal.Event{Dst: dst(1), Rule: "deny"})
	st := b.Snapshot()
	if len(st) != 2 || st[0].Reason != refusal.Rule || st[1].Reason != refusal.GuestUDP {
		t.Fatalf("snapshot = %+v", st)
	}
	if st[0].Count != 1 || st[0].Recent[0].At.IsZero() || st[0].Recent[0].Rule != "deny" {
		t.Errorf("rule: %+v", st[0])
	}
	g := st[1]
	if g.Count != refusal.RingSize+5 || len(g.Recent) != refusal.RingSize {
		t.Fatalf("guest-udp: count %d, %d events", g.Count, len(g.Recent))
	}
	if g.Recent[0].Dst.Port() != 1000+refusal.RingSize+4 || g.Recent[refusal.RingSize-1].Dst.Port() != 1005 {
		t.Errorf("not newest first: first %v last %v", g.Recent[0].Dst, g.Recent[refusal.RingSize-1].Dst)
	}
	if b.Count(refusal.ICMP) != 0 || b.Count(refusal.GuestUDP) != refusal.RingSize+5 {
		t.Error("Count")
	}
}

func TestMerge(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	a := []refusal.Stat{{Reason: refusal.ICMP, Count: 3, Recent: []refusal.Event{{At: at(5)}, {At: at(1)}}}}
	k := []refusal.Stat{
		{Reason: refusal.Rule, Count: 2},
		{Reason: refusal.ICMP, Count: 10, Recent: []refusal.Event{{At: at(7)}, {At: at(3)}}},
	}
	m := refusal.Merge(a, k)
	if len(m) != 2 || m[0].Reason != refusal.Rule || m[1].Reason != refusal.ICMP || m[1].Count != 13 {
		t.Fatalf("merge = %+v", m)
	}
	var got []int64
	for _, e := range m[1].Recent {
		got = append(got, e.At.Unix())
	}
	if len(got) != 4 || got[0] != 7 || got[1] != 5 || got[2] != 3 || got[3] != 1 {
		t.Errorf("events = %v, want 7 5 3 1", got)
	}
}

func TestConcurrent(t *testing.T) {
	var b refusal.Book
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				b.Add(refusal.Reason(w), refusal.Event{Dst: dst(uint16(i))})
				if i%50 == 0 {
					_ = b.Snapshot()
				}
			}
		})
	}
	wg.Wait()
	for w := range 4 {
		if n := b.Count(refusal.Reason(w)); n != 500 {
			t.Errorf("reason %d: %d", w, n)
		}
	}
}
