package router

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/policy"
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

// TestCarriedKeepsTheCage: a flow of a caged process that the router carries to one of its
// own listeners (the process asked a listener's address, which the walls leave open) stays
// caged there. Its socket bears the kernel's caged mark, and its executable (a caged
// hypervisor's child, sh) is named by no rule: the mark is all that cages it. The carried
// identity kept the source and the app but dropped the mark, so the listener judged the
// flow as this host's own, free of the cage.
func TestCarriedKeepsTheCage(t *testing.T) {
	var c carried
	c.init()
	var pf policy.Flow
	pf.Src = netip.MustParseAddr("192.0.2.1")
	pf.App, pf.AppPath, pf.CagedSocket = "sh", "/usr/bin/sh", true
	pol := policy.New(&conf.Config{}, policy.Env{})
	if !pol.Caged(&pf) {
		t.Fatal("the marked flow is not caged to begin with")
	}
	from := netip.MustParseAddrPort("192.0.2.1:40000")
	c.put(from, identityOf(&pf))
	id, ok := c.take(from)
	if !ok {
		t.Fatal("the carried identity was not found")
	}
	var got policy.Flow
	id.apply(&got)
	if !pol.Caged(&got) {
		t.Errorf("the carried flow %+v is not caged at the listener", got)
	}
	if got.App != pf.App || got.AppPath != pf.AppPath || got.Src != pf.Src {
		t.Errorf("carried %+v, want the owner and source of %+v", got, pf)
	}
}
