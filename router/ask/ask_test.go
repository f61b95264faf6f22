package ask

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/internal/wait"
)

// held starts n flows from src to k and returns their answers as they come.
func held(d *Desk, k Key, src string, n int, timeout time.Duration) <-chan Answer {
	out := make(chan Answer, n)
	for range n {
		go func() {
			a, _ := d.Hold(context.Background(), k, src, "rule", "exit", timeout)
			out <- a
		}()
	}
	return out
}

// waitHeld waits until the prompt for k holds n flows and returns it.
func waitHeld(t *testing.T, d *Desk, k Key, n int) Prompt {
	t.Helper()
	var found Prompt
	if !wait.Poll(5*time.Second, func() bool {
		for _, p := range d.Pending() {
			if p.Host == k.Host && p.Port == k.Port && p.Held == n {
				found = p
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no prompt for %v with %d flows held; pending %+v", k, n, d.Pending())
	}
	return found
}

func TestAnswers(t *testing.T) {
	k := Key{Host: "new.example", Port: 443}
	for _, c := range []struct {
		answer Answer
		// again is what a later flow to the same destination gets without a new answer.
		again Answer
	}{
		{Once, Timeout}, {Run, Run}, {Always, Always}, {Deny, Timeout},
	} {
		t.Run(c.answer.String(), func(t *testing.T) {
			var wrote []Prompt
			d := New(Options{Always: func(p Prompt, by string) error { wrote = append(wrote, p); return nil }})
			got := held(d, k, "vm 10.0.2.15", 3, 5*time.Second)
			p := waitHeld(t, d, k, 3)
			if len(d.Pending()) != 1 || p.Sources[0] != "vm 10.0.2.15" {
				t.Fatalf("pending = %+v, want one prompt for three flows", d.Pending())
			}
			if _, err := d.Answer(p.ID, c.answer, "test"); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if a := <-got; a != c.answer {
					t.Errorf("held flow got %v, want %v", a, c.answer)
				}
			}
			if len(d.Pending()) != 0 {
				t.Errorf("pending after the answer: %+v", d.Pending())
			}
			if (c.answer == Always) != (len(wrote) == 1) {
				t.Errorf("Always hook called %d times", len(wrote))
			}
			a, _ := d.Hold(context.Background(), k, "vm 10.0.2.15", "rule", "exit", 20*time.Millisecond)
			want := c.again
			if want == Always {
				want = Run // remembered for the run; the rule does the rest after the reload
			}
			if a != want {
				t.Errorf("a later flow got %v, want %v", a, want)
			}
			if _, err := d.Answer(p.ID, Once, "test"); err == nil {
				t.Error("a prompt answered twice")
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	d := New(Options{})
	start := time.Now()
	a, err := d.Hold(context.Background(), Key{Host: "x.example", Port: 80}, "s", "r", "p", 50*time.Millisecond)
	if a != Timeout || err != nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("Hold = %v, %v after %v; want a timeout after 50ms", a, err, time.Since(start))
	}
	if len(d.Pending()) != 0 || d.total != 0 || len(d.sources) != 0 {
		t.Errorf("left after the timeout: %+v, total %d", d.Pending(), d.total)
	}
}

func TestAlwaysFails(t *testing.T) {
	d := New(Options{Always: func(Prompt, string) error { return errors.New("disk full") }})
	k := Key{Host: "x.example", Port: 443}
	got := held(d, k, "s", 1, 5*time.Second)
	p := waitHeld(t, d, k, 1)
	if _, err := d.Answer(p.ID, Always, "test"); err == nil {
		t.Fatal("Always answered though its hook failed")
	}
	if waitHeld(t, d, k, 1).ID != p.ID {
		t.Fatal("the prompt went away")
	}
	d.Answer(p.ID, Deny, "test")
	if a := <-got; a != Deny {
		t.Errorf("got %v", a)
	}
}

// TestBounds: one source holds at most its share, and every flow past it is refused at
// once; another source is still asked about (and the total bound holds).
func TestBounds(t *testing.T) {
	d := New(Options{MaxPerSource: 8, MaxTotal: 12})
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	full := make(chan struct{}, 10000)
	for i := range 10000 {
		wg.Go(func() {
			k := Key{Host: "h" + string(rune('a'+i%26)) + ".example", Port: 443}
			if _, err := d.Hold(ctx, k, "greedy", "r", "p", time.Minute); errors.Is(err, ErrFull) {
				full <- struct{}{}
			}
		})
	}
	if !wait.Poll(10*time.Second, func() bool { return len(full) >= 10000-8 }) {
		t.Fatalf("%d refused at once, want %d", len(full), 10000-8)
	}
	if n := len(d.Pending()); n > 8 {
		t.Errorf("%d prompts for one source, want at most 8", n)
	}
	k := Key{Host: "other.example", Port: 443}
	got := held(d, k, "other", 1, time.Minute)
	p := waitHeld(t, d, k, 1)
	d.Answer(p.ID, Once, "test")
	if a := <-got; a != Once {
		t.Errorf("the other source's flow got %v", a)
	}
	cancel()
	wg.Wait()
	if d.total != 0 {
		t.Errorf("total %d after every flow ended", d.total)
	}
}

// TestBudgets: a budget's question waits as one prompt per guest, budget and domain, with
// the question as its rule; once and deny answer it; always answers as run and writes
// nothing (the Always hook is not called), so the next question of the guest is approved
// unasked; a shorter ctx bounds the wait.
func TestBudgets(t *testing.T) {
	hooked := false
	d := New(Options{Always: func(Prompt, string) error { hooked = true; return nil }})
	b := &Budgets{Desk: d, Timeout: func() time.Duration { return time.Minute }}
	q := overbudget.Question{Budget: overbudget.Names, Guest: "10.0.2.0/24", Domain: "example.com", Used: 11, Limit: 10, Window: time.Minute}
	for _, c := range []struct {
		a    Answer
		want bool
	}{{Once, true}, {Deny, false}, {Always, true}} {
		got := make(chan bool, 1)
		go func() { got <- b.AskBudget(context.Background(), q) }()
		var ps []Prompt
		wait.For(t, "the question", time.Minute, func() bool { ps = d.Pending(); return len(ps) == 1 })
		if p := ps[0]; p.Host != "example.com" || p.Port != 0 || p.Budget != overbudget.Names || p.Rule != q.String() || len(p.Sources) != 1 || p.Sources[0] != q.Guest {
			t.Fatalf("prompt %+v", p)
		}
		if _, err := d.Answer(ps[0].ID, c.a, "test"); err != nil {
			t.Fatal(err)
		}
		if g := <-got; g != c.want {
			t.Errorf("%v: allowed %v, want %v", c.a, g, c.want)
		}
	}
	if hooked {
		t.Error("always on a budget's question called the Always hook")
	}
	if !b.AskBudget(context.Background(), q) || len(d.Pending()) != 0 {
		t.Error("after always, the guest's next question was asked")
	}
	q.Guest = "10.0.3.0/24" // another guest: asked, and the ctx's end refuses
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if b.AskBudget(ctx, q) {
		t.Error("unanswered: allowed")
	}
	if (*Budgets)(nil).AskBudget(context.Background(), q) {
		t.Error("nobody to ask: allowed")
	}
}
