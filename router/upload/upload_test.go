package upload

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/overbudget/overbudgettest"
)

// clock is a settable time for the budgets' windows.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTest(t *testing.T, over Over) (*Budget, *clock, *bytes.Buffer) {
	t.Helper()
	c := &clock{t: time.Unix(1_000_000, 0)}
	var logs bytes.Buffer
	b := New(Limits{PerDomain: 1000, Window: time.Minute, Over: over}, c.now, slog.New(slog.NewTextHandler(&logs, nil)))
	if b == nil {
		t.Fatal("New returned nil for a budget")
	}
	return b, c, &logs
}

func TestNoBudget(t *testing.T) {
	if b := New(Limits{Window: time.Minute}, nil, nil); b != nil {
		t.Fatal("a zero PerDomain made a budget")
	}
	var b *Budget
	f := b.Flow("vm 10.0.0.0/24", "example.com")
	if f != nil {
		t.Fatal("a nil budget made a counter")
	}
	if f.Add(1<<40) || b.Refuses("vm 10.0.0.0/24", "example.com") || b.Uses(0) != nil {
		t.Fatal("a nil budget or counter limited something")
	}
}

// TestRefuse: past the budget the flow is cut and new flows refused; another guest and
// another domain are not; the next window starts afresh.
func TestRefuse(t *testing.T) {
	b, c, logs := newTest(t, Refuse)
	g1, g2 := "vm 10.0.1.0/24", "vm 10.0.2.0/24"
	a := b.Flow(g1, "Example.com")
	a2 := b.Flow(g1, "example.com") // a second flow of the guest to the domain
	other := b.Flow(g1, "example.org")
	guest2 := b.Flow(g2, "example.com")
	if a.Add(600) || a2.Add(400) {
		t.Fatal("cut at the budget (1000 of 1000)")
	}
	if b.Refuses(g1, "example.com") {
		t.Fatal("refused at the budget, not past it")
	}
	if !a2.Add(1) {
		t.Fatal("not cut past the budget")
	}
	if !a.Add(1) {
		t.Fatal("another flow of the guest to the domain was not cut past the budget")
	}
	if !b.Refuses(g1, "EXAMPLE.com") {
		t.Fatal("a new flow past the budget was not refused")
	}
	if other.Add(1000) || b.Refuses(g1, "example.org") {
		t.Fatal("another domain was limited")
	}
	if guest2.Add(1000) || b.Refuses(g2, "example.com") {
		t.Fatal("another guest was limited")
	}
	if n := strings.Count(logs.String(), "budget of bytes"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs)
	}
	c.t = c.t.Add(time.Minute - time.Nanosecond)
	if !b.Refuses(g1, "example.com") {
		t.Fatal("not refused before the window ended")
	}
	c.t = c.t.Add(time.Nanosecond)
	if b.Refuses(g1, "example.com") {
		t.Fatal("refused after the window ended")
	}
	if a.Add(1000) {
		t.Fatal("the new window did not start afresh")
	}
	if !a.Add(1) {
		t.Fatal("the new window has no budget")
	}
	if n := strings.Count(logs.String(), "budget of bytes"); n != 2 {
		t.Fatalf("logged %d times in two windows, want twice:\n%s", n, logs)
	}
}

// TestAlert: past the budget the bytes pass and are counted; logged once.
func TestAlert(t *testing.T) {
	b, _, logs := newTest(t, Alert)
	f := b.Flow("vm 10.0.1.0/24", "example.com")
	for range 5 {
		if f.Add(1000) {
			t.Fatal("cut with over = alert")
		}
	}
	if b.Refuses("vm 10.0.1.0/24", "example.com") {
		t.Fatal("refused with over = alert")
	}
	u := b.Uses(0)
	if len(u) != 1 || u[0].Used != 5000 || u[0].Limit != 1000 || !u[0].Over {
		t.Fatalf("uses = %+v, want 5000 of 1000, over", u)
	}
	if n := strings.Count(logs.String(), "alert only"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs)
	}
}

// TestWindowPerGuest: a guest's window starts with its first byte, not another's.
func TestWindowPerGuest(t *testing.T) {
	b, c, _ := newTest(t, Refuse)
	b.Flow("a", "example.com").Add(1001)
	c.t = c.t.Add(30 * time.Second)
	b.Flow("b", "example.com").Add(1001)
	c.t = c.t.Add(30 * time.Second)
	if b.Refuses("a", "example.com") {
		t.Fatal("guest a's window did not end after a minute")
	}
	if !b.Refuses("b", "example.com") {
		t.Fatal("guest b's window ended with a's")
	}
}

// TestBounds: past maxDomains a guest's further domains share one budget; past maxGuests
// the oldest window goes.
func TestBounds(t *testing.T) {
	b, c, _ := newTest(t, Refuse)
	for i := range maxDomains {
		b.Flow("a", fmt.Sprintf("d%d.example", i)).Add(1)
	}
	x, y := b.Flow("a", "x.example"), b.Flow("a", "y.example")
	if x.Add(600) || y.Add(400) {
		t.Fatal("cut within the overflow's budget")
	}
	if !y.Add(1) || !b.Refuses("a", "z.example") {
		t.Fatal("the domains past the bound do not share one budget")
	}
	for i := range maxGuests {
		c.t = c.t.Add(time.Millisecond)
		b.Flow(fmt.Sprintf("g%d", i), "example.com").Add(1)
	}
	if b.guests.Len() > maxGuests {
		t.Fatalf("%d guests kept, bound %d", b.guests.Len(), maxGuests)
	}
	if b.Refuses("a", "z.example") {
		t.Fatal("the oldest guest's window was not the one dropped")
	}
	if u := b.Uses(10); len(u) != 10 {
		t.Fatalf("Uses(10) gave %d", len(u))
	}
}

func BenchmarkAdd(b *testing.B) {
	bu := New(Limits{PerDomain: 1 << 62, Window: time.Hour}, nil, nil)
	f := bu.Flow("vm 10.0.0.0/24", "example.com")
	for b.Loop() {
		f.Add(32 << 10)
	}
}

// TestAsk: past the budget, the flow that passes it asks (the fake asker) with the guest,
// domain, budget and count; allowed, the guest's bytes to the domain pass unasked for the
// rest of the window, and its new flows are not refused; denied, the flow is cut, the
// guest's next chunk is cut unasked and its new flows refused, as with Refuse; the next
// window asks afresh. Holds is true with Ask only.
func TestAsk(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	asker := &overbudgettest.Asker{Allow: true}
	b := New(Limits{PerDomain: 1000, Window: time.Minute, Over: Ask, Asker: asker}, c.now, nil)
	g1, g2 := "vm 10.0.1.0/24", "vm 10.0.2.0/24"
	a, d := b.Flow(g1, "example.com"), b.Flow(g2, "example.com")
	if !a.Holds() || (*Flow)(nil).Holds() {
		t.Fatal("Holds: want true for an asking budget's flow only")
	}
	if a.Add(1000) || len(asker.Questions()) != 0 {
		t.Fatal("asked (or cut) at the budget, not past it")
	}
	if a.Add(1) || a.Add(5000) || b.Refuses(g1, "example.com") {
		t.Fatal("allowed, then cut or refused")
	}
	want := overbudget.Question{Budget: overbudget.BytesUp, Guest: g1, Domain: "example.com", Used: 1001, Limit: 1000, Window: time.Minute}
	if qs := asker.Questions(); len(qs) != 1 || qs[0] != want {
		t.Fatalf("questions %+v, want one %+v", qs, want)
	}
	asker.Allow = false
	if d.Add(1000) || !d.Add(1) {
		t.Fatal("denied, and not cut")
	}
	if !d.Add(1) || !b.Refuses(g2, "example.com") || len(asker.Questions()) != 2 {
		t.Fatalf("after the denial: not cut or refused, or asked again (%d questions)", len(asker.Questions()))
	}
	c.t = c.t.Add(time.Minute)
	if b.Refuses(g2, "example.com") || d.Add(1000) || !d.Add(1) || len(asker.Questions()) != 3 {
		t.Fatal("the next window did not start afresh")
	}
	for _, over := range []Over{Refuse, Alert} {
		if New(Limits{PerDomain: 1, Window: time.Minute, Over: over}, nil, nil).Flow("g", "d").Holds() {
			t.Errorf("%v holds", over)
		}
	}
}

// TestAskNobody: Ask with no asker refuses past the budget, as Refuse does.
func TestAskNobody(t *testing.T) {
	b := New(Limits{PerDomain: 10, Window: time.Minute, Over: Ask}, nil, nil)
	f := b.Flow("g", "example.com")
	if f.Add(10) || !f.Add(1) || !b.Refuses("g", "example.com") {
		t.Fatal("with nobody to ask, not cut and refused past the budget")
	}
}

// TestAskStop: Stop ends a flow's wait for the answer: Add reports the cut, and the guest
// is neither allowed nor denied for the window (its next flow asks again).
func TestAskStop(t *testing.T) {
	asked := make(chan struct{}, 2)
	asker := &overbudgettest.Asker{Answer: func(ctx context.Context, q overbudget.Question) bool {
		asked <- struct{}{}
		<-ctx.Done()
		return false
	}}
	b := New(Limits{PerDomain: 10, Window: time.Minute, Over: Ask, Asker: asker}, nil, nil)
	f := b.Flow("g", "example.com")
	cut := make(chan bool, 1)
	go func() { cut <- f.Add(11) }()
	<-asked
	f.Stop()
	if !<-cut {
		t.Fatal("stopped while asking: not cut")
	}
	if b.Refuses("g", "example.com") {
		t.Fatal("a stopped question was remembered as a denial")
	}
	(*Flow)(nil).Stop()
	New(Limits{PerDomain: 10, Window: time.Minute}, nil, nil).Flow("g", "d").Stop()
}
