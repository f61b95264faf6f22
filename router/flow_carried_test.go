package router

import (
	"net/netip"
	"testing"
	"time"
)

// TestCarriedTake: a client the router did not carry is not held up when no connect to the
// router's own listeners is under way (a guest behind slirp4netns or pasta comes from this
// machine: every connection of it used to wait carriedWait), and an entry put during such a
// connect is found by a take that came first.
func TestCarriedTake(t *testing.T) {
	var c carried
	c.init()
	from := netip.MustParseAddrPort("127.0.0.1:40000")
	start := time.Now()
	if _, ok := c.take(from); ok {
		t.Fatal("took an entry nobody put")
	}
	if d := time.Since(start); d > carriedWait/2 {
		t.Errorf("an uncarried client waited %v with no connect under way", d)
	}
	c.begin()
	got := make(chan identity, 1)
	go func() {
		id, _ := c.take(from)
		got <- id
	}()
	time.Sleep(10 * time.Millisecond) // the listener's accept before the dialer's put
	want := identity{src: netip.MustParseAddr("10.0.2.15"), fromVM: true}
	c.put(from, want)
	c.end()
	select {
	case id := <-got:
		if id.src != want.src || !id.fromVM {
			t.Errorf("took %+v; want %+v", id, want)
		}
	case <-time.After(time.Second):
		t.Fatal("take did not return")
	}
}
