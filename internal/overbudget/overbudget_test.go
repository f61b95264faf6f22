package overbudget_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/overbudget/overbudgettest"
)

// TestDecide: refuse never lets on, alert always, ask as the owner answers (nobody to ask:
// refused); only ask asks.
func TestDecide(t *testing.T) {
	q := overbudget.Question{Budget: overbudget.Names, Guest: "10.0.2.0/24", Domain: "example.com", Used: 11, Limit: 10}
	for _, c := range []struct {
		name  string
		mode  overbudget.Mode
		asker *overbudgettest.Asker
		pass  bool
		asked int
	}{
		{"refuse", overbudget.Refuse, &overbudgettest.Asker{Allow: true}, false, 0},
		{"alert", overbudget.Alert, &overbudgettest.Asker{}, true, 0},
		{"ask allowed", overbudget.Ask, &overbudgettest.Asker{Allow: true}, true, 1},
		{"ask denied", overbudget.Ask, &overbudgettest.Asker{}, false, 1},
	} {
		if got := overbudget.Decide(context.Background(), c.mode, c.asker, q); got != c.pass {
			t.Errorf("%s: pass %v, want %v", c.name, got, c.pass)
		}
		if qs := c.asker.Questions(); len(qs) != c.asked || (c.asked > 0 && qs[0] != q) {
			t.Errorf("%s: asked %+v", c.name, qs)
		}
	}
	if overbudget.Decide(context.Background(), overbudget.Ask, nil, q) {
		t.Error("ask with nobody to ask: let on, want refused")
	}
}

// TestReport: the line says what the mode does past the budget, in the budget's words, with
// the guest, the domain, the budget and the window.
func TestReport(t *testing.T) {
	q := overbudget.Question{Budget: overbudget.BytesUp, Guest: "10.0.2.0/24", Domain: "example.com", Used: 1001, Limit: 1000, Window: time.Minute}
	words := overbudget.Words{overbudget.Refuse: "cut", overbudget.Alert: "passed", overbudget.Ask: "asked"}
	for mode, word := range words {
		var b strings.Builder
		overbudget.Report(slog.New(slog.NewTextHandler(&b, nil)), "over: ", overbudget.Mode(mode), words, q)
		want := `level=WARN msg="over: ` + word + `" guest=10.0.2.0/24 domain=example.com budget=1000 window=1m0s`
		if got := strings.TrimSpace(b.String()); !strings.HasSuffix(got, want) {
			t.Errorf("mode %d: %q, want it to end %q", mode, got, want)
		}
	}
}
