package router

import (
	"bytes"
	"io"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/router/upload"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// TestUploadBudgetAsk: with [budget] over = "ask", through the router and its desk (as
// `router ask` answers), a guest's upload that passes its budget is held, no byte past the
// budget sent, while one question (guest, domain, budget) waits; allowed, the upload goes
// on whole and the guest's further flows to the domain pass unasked for the window;
// denied, another guest's upload is cut, having sent at most the budget, and its next flow
// to the domain is refused.
func TestUploadBudgetAsk(t *testing.T) {
	sink, received := startSink(t)
	upA, wwwA := netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("198.18.0.8")
	p := startProxy(t, map[string]netip.Addr{"up.a.test": sink.Addr(), "www.a.test": sink.Addr()}, nil)
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: map[netip.Addr]string{upA: "up.a.test", wwwA: "www.a.test"}}
	pol := Settings{
		Decision:  mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port()}}},
		Sockmap:   true,
	}
	desk := ask.New(ask.Options{})
	asker := &ask.Budgets{Desk: desk, Timeout: func() time.Duration { return waitFor }}
	b := upload.New(upload.Limits{PerDomain: testUploadLimit, Window: time.Minute, Over: upload.Ask, Asker: asker}, nil, nil)
	e := newEnv(t, pol, Options{Names: names, Uploads: b, Asks: desk}) // the loop set-up: an asking budget goes off it
	guest1, guest2 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")

	// upload sends 4 budgets of value from src to dst, on a goroutine: its error comes on
	// the channel once the whole was written and the far side closed, or the first failure.
	upload := func(src, dst netip.Addr, value byte) <-chan error {
		c := dialGuest(t, e, src, netip.AddrPortFrom(dst, sink.Port()))
		c.SetDeadline(time.Now().Add(waitFor))
		errc := make(chan error, 1)
		go func() {
			piece := bytes.Repeat([]byte{value}, 256<<10)
			for sent := 0; sent < 4*testUploadLimit; sent += len(piece) {
				if _, err := c.Write(piece); err != nil {
					errc <- err
					return
				}
			}
			c.CloseWrite()
			_, err := io.Copy(io.Discard, c)
			errc <- err
		}()
		return errc
	}
	// question waits for the one pending question, about guest, and checks it.
	question := func(guest string) ask.Prompt {
		t.Helper()
		var ps []ask.Prompt
		wait.For(t, "the budget's question", waitFor, func() bool { ps = desk.Pending(); return len(ps) == 1 })
		q := ps[0]
		if q.Budget != overbudget.BytesUp || q.Host != "a.test" || !slices.Equal(q.Sources, []string{guest}) || q.Held != 1 {
			t.Fatalf("question %+v, want %s's bytes up to a.test", q, guest)
		}
		return q
	}
	answer := func(q ask.Prompt, a ask.Answer) {
		t.Helper()
		if _, err := desk.Answer(q.ID, a, "test"); err != nil {
			t.Fatal(err)
		}
	}

	// Allowed: held at the budget, then whole.
	errc := upload(guest1, upA, 'x')
	q := question("host 127.0.0.2")
	if got := received.n['x'].Load(); got > testUploadLimit {
		t.Fatalf("while asking, the destination received %d bytes, past the budget %d", got, testUploadLimit)
	}
	answer(q, ask.Once)
	if err := <-errc; err != nil {
		t.Fatalf("the allowed upload: %v", err)
	}
	wait.For(t, "the allowed upload to arrive whole", waitFor, func() bool { return received.n['x'].Load() == 4*testUploadLimit })
	if err := <-upload(guest1, wwwA, 'y'); err != nil { // the rest of the window: unasked
		t.Fatalf("the allowed guest's next upload: %v", err)
	}
	wait.For(t, "the next upload to arrive whole", waitFor, func() bool { return received.n['y'].Load() == 4*testUploadLimit })

	// Denied: cut, and the next flow refused.
	errc = upload(guest2, upA, 'z')
	answer(question("host 127.0.0.3"), ask.Deny)
	if err := <-errc; err == nil {
		t.Fatal("the denied upload went through")
	}
	waitStatus(t, e, "the cut flow to end", func(st Stats) bool { return st.Totals.Live == 0 })
	if got := received.n['z'].Load(); got > testUploadLimit {
		t.Fatalf("the destination received %d bytes of the denied upload, past the budget %d", got, testUploadLimit)
	}
	wantReset(t, dialGuest(t, e, guest2, netip.AddrPortFrom(wwwA, sink.Port())))
	if n := e.r.book.Count(refusal.Budget); n != 2 {
		t.Errorf("budget refusals = %d, want 2 (the denied flow and the refused one)", n)
	}
	if n := loopSetups(e.r); n != 0 {
		t.Errorf("the loops set up %d flows under an asking budget, want none (its waits would hold the loop)", n)
	}
	if len(desk.Pending()) != 0 {
		t.Errorf("questions left: %+v", desk.Pending())
	}
}
