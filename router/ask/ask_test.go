package ask

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	a, err := d.Hold(context.Background(), Key{"x.example", 80}, "s", "r", "p", 50*time.Millisecond)
	if a != Timeout || err != nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("Hold = %v, %v after %v; want a timeout after 50ms", a, err, time.Since(start))
	}
	if len(d.Pending()) != 0 || d.total != 0 || len(d.sources) != 0 {
		t.Errorf("left after the timeout: %+v, total %d", d.Pending(), d.total)
	}
}

func TestAlwaysFails(t *testing.T) {
	d := New(Options{Always: func(Prompt, string) error { return errors.New("disk full") }})
	k := Key{"x.example", 443}
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
	k := Key{"other.example", 443}
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
