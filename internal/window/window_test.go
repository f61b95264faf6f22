package window

import (
	"testing"
	"time"
)

func TestSpanStartsAgainWhenItsWindowEnds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var dropped int
	g := New[string, int](time.Minute, 8, func(s *Span[int]) { dropped += len(s.Domains) })
	s := g.Span("a", t0)
	n := 3
	s.Domains["x.com"] = &n
	if g.Span("a", t0.Add(59*time.Second)) != s || g.Current("a", t0.Add(59*time.Second)) != s {
		t.Fatal("the window was started again before it ended")
	}
	if g.Current("a", t0.Add(time.Minute)) != nil {
		t.Fatal("Current returned an ended window")
	}
	s2 := g.Span("a", t0.Add(time.Minute))
	if s2 == s || len(s2.Domains) != 0 || dropped != 1 {
		t.Fatalf("ended window not dropped: new %v, dropped %d", s2 == s, dropped)
	}
}

func TestOldestGuestMakesRoom(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := New[int, int](time.Hour, 3, nil)
	for i := range 3 {
		g.Span(i, t0.Add(time.Duration(i)*time.Second))
	}
	g.Span(9, t0.Add(10*time.Second))
	if g.Current(0, t0.Add(11*time.Second)) != nil {
		t.Fatal("the oldest guest was kept past the bound")
	}
	for _, k := range []int{1, 2, 9} {
		if g.Current(k, t0.Add(11*time.Second)) == nil {
			t.Fatalf("guest %d dropped", k)
		}
	}
}

func TestLargest(t *testing.T) {
	type use struct {
		g, d string
		n    int
	}
	uses := []use{{"b", "x", 5}, {"a", "y", 1}, {"a", "x", 9}, {"c", "z", 7}}
	got := Largest(uses, 3, func(u use) int { return u.n }, func(u use) (string, string) { return u.g, u.d })
	want := []use{{"a", "x", 9}, {"b", "x", 5}, {"c", "z", 7}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
