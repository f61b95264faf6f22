package router

import (
	"net/netip"
	"testing"
	"testing/synctest"
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
	// The listener's accept takes before the dialer's put: in a bubble, so that the take is
	// known to wait (blocked on the condition) when the put comes.
	synctest.Test(t, func(t *testing.T) {
		var c carried
		c.init()
		c.begin()
		got := make(chan identity, 1)
		go func() {
			id, _ := c.take(from)
			got <- id
		}()
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("take returned with a connect under way and nothing put")
		}
		want := identity{src: netip.MustParseAddr("10.0.2.15"), fromVM: true}
		c.put(from, want)
		c.end()
		if id := <-got; id.src != want.src || !id.fromVM {
			t.Errorf("took %+v; want %+v", id, want)
		}
	})
}
