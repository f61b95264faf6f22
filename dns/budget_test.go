package dns

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/rules/refusal"
)

// TestNameBudget: a DNS-tunnel stand-in (1,000 unique labels under one domain within a
// minute) is refused past the guest's budget, with an Extended DNS Error that says why,
// while another guest and another domain of the same guest are answered; a name asked
// before stays answered; the next window starts afresh. With alert, nothing is refused.
func TestNameBudget(t *testing.T) {
	for _, alert := range []bool{false, true} {
		t.Run(fmt.Sprintf("alert=%v", alert), func(t *testing.T) {
			clock := newClock()
			book := new(refusal.Book)
			guests := []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("10.0.3.0/24")}
			s, err := New(Config{Now: clock.Now, Guests: guests, Budget: NameBudget{PerDomain: 50, Window: time.Minute, Alert: alert}},
				Dialers{Refusals: book}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tunnel, other := Source{Addr: netip.MustParseAddr("10.0.2.15")}, Source{Addr: netip.MustParseAddr("10.0.3.7")}
			ask := func(src Source, name string) *mdns.Msg {
				q := query(name, mdns.TypeA)
				q.SetEdns0(1232, false)
				return s.HandleFrom(context.Background(), src, q)
			}
			refused := 0
			for i := range 1000 {
				// Two addresses of one guest network: one budget.
				src := tunnel
				if i%2 == 1 {
					src = Source{Addr: netip.MustParseAddr("10.0.2.99")}
				}
				if m := ask(src, fmt.Sprintf("c%04x.t.exfil.example.co.uk.", i)); m.Rcode == mdns.RcodeNameError {
					refused++
				}
				clock.Advance(50 * time.Millisecond) // 1,000 names in 50 s
			}
			want := 950
			if alert {
				want = 0
			}
			if refused != want || book.Count(refusal.Budget) != uint64(want) {
				t.Errorf("refused %d of 1000 tunnel names (%d counted), want %d", refused, book.Count(refusal.Budget), want)
			}
			for _, c := range []struct {
				src  Source
				name string
			}{
				{tunnel, "c0000.t.exfil.example.co.uk."}, // asked before, within budget
				{tunnel, "registry.npmjs.org."},          // another domain
				{other, "c9999.t.exfil.example.co.uk."},  // another guest
			} {
				if m := ask(c.src, c.name); m.Rcode != mdns.RcodeSuccess || len(m.Answer) != 1 {
					t.Errorf("%s from %v: %s, want an answer", c.name, c.src.Addr, mdns.RcodeToString[m.Rcode])
				}
			}
			if !alert {
				m := ask(tunnel, "late.exfil.example.co.uk.")
				opt := m.IsEdns0()
				if m.Rcode != mdns.RcodeNameError || opt == nil || len(opt.Option) != 1 {
					t.Fatalf("past the budget: %s %v, want NXDOMAIN with an EDE", mdns.RcodeToString[m.Rcode], opt)
				}
				if e, ok := opt.Option[0].(*mdns.EDNS0_EDE); !ok || e.InfoCode != mdns.ExtendedErrorCodeBlocked {
					t.Errorf("EDE %v, want 15 (Blocked)", opt.Option[0])
				}
			}
			uses := s.NameBudgets(0)
			var tunnelUse, otherUse NameUse
			for _, u := range uses {
				switch {
				case u.Guest == "10.0.2.0/24" && u.Domain == "example.co.uk":
					tunnelUse = u
				case u.Guest == "10.0.3.0/24" && u.Domain == "example.co.uk":
					otherUse = u
				}
			}
			if tunnelUse.Names < 1000 || tunnelUse.Limit != 50 || !tunnelUse.Over || otherUse.Names != 1 || otherUse.Over {
				t.Errorf("name budgets = %+v", uses)
			}
			clock.Advance(time.Minute)
			if u := s.NameBudgets(0); len(u) != 0 {
				t.Errorf("after the windows ended: %+v", u)
			}
			if m := ask(tunnel, "next.exfil.example.co.uk."); m.Rcode != mdns.RcodeSuccess {
				t.Errorf("in the next window: %s, want an answer", mdns.RcodeToString[m.Rcode])
			}
		})
	}
}

// TestBudgetBounded: a guest asking a name under a new domain each time is never refused
// for its first name under each, and the budget's memory stays within its bounds.
func TestBudgetBounded(t *testing.T) {
	b := newBudget(NameBudget{PerDomain: 3, Window: time.Hour}, newClock().Now, nil)
	k := Source{Addr: netip.MustParseAddr("10.0.2.15")}.key()
	for i := range maxBudgetDomains {
		if _, over := b.over(k, fmt.Sprintf("x.d%d.example", i)); over {
			t.Fatalf("first name under domain %d refused", i)
		}
	}
	if _, over := b.over(k, "x.one-too-many.example"); !over {
		t.Error("a domain past the per-guest bound was counted, want it refused")
	}
	if b.names > maxBudgetNames || len(b.guests) != 1 {
		t.Errorf("kept %d names for %d guests", b.names, len(b.guests))
	}
	alert := newBudget(NameBudget{PerDomain: 3, Window: time.Hour, Alert: true}, newClock().Now, nil)
	for i := range maxBudgetDomains + 1 {
		if _, over := alert.over(k, fmt.Sprintf("x.d%d.example", i)); over {
			t.Fatalf("alert only: domain %d refused", i)
		}
	}
}
