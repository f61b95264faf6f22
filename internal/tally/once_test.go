package tally

import (
	"strconv"
	"testing"
)

func TestOnce(t *testing.T) {
	var o Once
	if !o.First("a") || o.First("a") || !o.First("b") {
		t.Fatal("First: want true for a new key, false for a seen one")
	}
	for i := range MaxOnce {
		o.First(strconv.Itoa(i))
	}
	for range 2 {
		if !o.First("past the bound") {
			t.Error("a key past the bound is not remembered: it counts as new each time")
		}
	}
}
