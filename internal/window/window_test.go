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
	uses := []Use{{Guest: "b", Domain: "x", Used: 5}, {Guest: "a", Domain: "y", Used: 1}, {Guest: "a", Domain: "x", Used: 9}, {Guest: "c", Domain: "z", Used: 7}}
	got := Largest(uses, 3)
	want := []Use{{Guest: "a", Domain: "x", Used: 9}, {Guest: "b", Domain: "x", Used: 5}, {Guest: "c", Domain: "z", Used: 7}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
