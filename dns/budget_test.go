package dns

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/overbudget/overbudgettest"
	"github.com/agentcage/router/rules/refusal"
)

// TestNameBudget: a DNS-tunnel stand-in (1,000 unique labels under one domain within a
// minute) is refused past the guest's budget, with an Extended DNS Error that says why,
// while another guest and another domain of the same guest are answered; a name asked
// before stays answered; the next window starts afresh. With alert, nothing is refused;
// with ask, the host's owner is asked (the fake asker) while the query waits: allowed once,
// the guest's names under the domain are answered for the rest of the window; denied, each
// new name is asked about and refused as with refuse.
func TestNameBudget(t *testing.T) {
	for _, c := range []struct {
		name  string
		over  overbudget.Mode
		allow bool
		asked int // questions
	}{
		{"refuse", overbudget.Refuse, false, 0},
		{"alert", overbudget.Alert, false, 0},
		{"ask-allow", overbudget.Ask, true, 1},
		{"ask-deny", overbudget.Ask, false, 951}, // the 950 tunnel names, and late.
	} {
		alert := c.over == overbudget.Alert || c.allow
		t.Run(c.name, func(t *testing.T) {
			clock := newClock()
			book := new(refusal.Book)
			asker := &overbudgettest.Asker{Allow: c.allow}
			guests := []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("10.0.3.0/24")}
			s, err := New(Config{Now: clock.Now, Guests: guests, Budget: NameBudget{PerDomain: 50, Window: time.Minute, Over: c.over, Asker: asker}},
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
			if tunnelUse.Used < 1000 || tunnelUse.Limit != 50 || !tunnelUse.Over || otherUse.Used != 1 || otherUse.Over {
				t.Errorf("name budgets = %+v", uses)
			}
			clock.Advance(time.Minute)
			if u := s.NameBudgets(0); len(u) != 0 {
				t.Errorf("after the windows ended: %+v", u)
			}
			if m := ask(tunnel, "next.exfil.example.co.uk."); m.Rcode != mdns.RcodeSuccess {
				t.Errorf("in the next window: %s, want an answer", mdns.RcodeToString[m.Rcode])
			}
			qs := asker.Questions()
			if len(qs) != c.asked {
				t.Fatalf("asked %d questions, want %d", len(qs), c.asked)
			}
			wantQ := overbudget.Question{Budget: overbudget.Names, Guest: "10.0.2.0/24", Domain: "example.co.uk", Used: 51, Limit: 50, Window: time.Minute}
			if len(qs) > 0 && qs[0] != wantQ {
				t.Errorf("question %+v, want %+v", qs[0], wantQ)
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
		if _, _, past := b.over(k, fmt.Sprintf("x.d%d.example", i)); past {
			t.Fatalf("first name under domain %d refused", i)
		}
	}
	if _, _, past := b.over(k, "x.one-too-many.example"); !past {
		t.Error("a domain past the per-guest bound was counted, want it refused")
	}
	if b.names > maxBudgetNames || b.guests.Len() != 1 {
		t.Errorf("kept %d names for %d guests", b.names, b.guests.Len())
	}
	alert := newBudget(NameBudget{PerDomain: 3, Window: time.Hour, Over: overbudget.Alert}, newClock().Now, nil)
	for i := range maxBudgetDomains + 1 {
		d, n, past := alert.over(k, fmt.Sprintf("x.d%d.example", i))
		if past && !alert.decide(context.Background(), k, d, n) {
			t.Fatalf("alert only: domain %d refused", i)
		}
	}
}

// TestNameBudgetAskWithinTimeout: with ask, a query past the budget waits for the answer
// at most the DNS timeout (the question's ctx ends then), and is refused with the EDE when
// no answer comes.
func TestNameBudgetAskWithinTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	var deadline time.Duration
	asker := &overbudgettest.Asker{Answer: func(ctx context.Context, q overbudget.Question) bool {
		dl, ok := ctx.Deadline()
		if !ok {
			return true // no bound: let on, which fails the test below
		}
		deadline = time.Until(dl)
		<-ctx.Done()
		return false
	}}
	s, err := New(Config{Timeout: timeout, Budget: NameBudget{PerDomain: 1, Window: time.Minute, Over: overbudget.Ask, Asker: asker}},
		Dialers{Refusals: new(refusal.Book)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := Source{Addr: netip.MustParseAddr("10.0.2.15")}
	for i, want := range []int{mdns.RcodeSuccess, mdns.RcodeNameError} {
		q := query(fmt.Sprintf("n%d.example.com.", i), mdns.TypeA)
		q.SetEdns0(1232, false)
		m := s.HandleFrom(context.Background(), src, q)
		if m.Rcode != want {
			t.Fatalf("name %d: %s, want %s", i, mdns.RcodeToString[m.Rcode], mdns.RcodeToString[want])
		}
		if want == mdns.RcodeNameError {
			if opt := m.IsEdns0(); opt == nil || len(opt.Option) != 1 {
				t.Errorf("refused without an EDE: %v", opt)
			}
		}
	}
	if len(asker.Questions()) != 1 || deadline <= 0 || deadline > timeout {
		t.Errorf("asked %d questions with %v left, want 1 within %v", len(asker.Questions()), deadline, timeout)
	}
}
