//go:build linux

package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// TestInboundSlotsPerGuest: one guest that takes eight addresses of its network (antispoof
// accepts any of them) and opens 512 idle connections from each, 4,096 in all, used to take
// every slot of the inbound, and the second guest was refused. Now the first guest stops at
// its share of the inbounds' budget; the second guest's tunnel, the first guest's model
// forward and `router status` still work.
func TestInboundSlotsPerGuest(t *testing.T) {
	inbound := `
[[inbound]]
name = "shared-socks"
listen = "10.0.2.2:1080"
allow = ["10.0.2.0/24", "` + lab.SecondGuestNetwork + `"]
`
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, inbound))
	guest2, err := s.lab.AddSecondGuest(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	var addrs []string
	for i := range 8 {
		a := fmt.Sprintf("10.0.2.%d", 100+i)
		if out, code := run(s.ctx, s.lab.Guest(), "ip", "addr", "add", a+"/24", "dev", lab.GuestDev); code != 0 {
			t.Fatalf("ip addr add %s in the guest: exit %d, %s", a, code, out)
		}
		addrs = append(addrs, a)
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for _, a := range addrs {
		for range 512 {
			c, err := s.lab.Guest().DialFrom(s.ctx, "tcp", a, "10.0.2.2:1080")
			if err != nil {
				continue
			}
			conns = append(conns, c)
		}
	}
	time.Sleep(500 * time.Millisecond) // the router's accepts catch up
	st := s.status()
	t.Logf("one guest of 8 addresses, %d connections opened: the inbounds hold %d of %d", len(conns), st.Budgets.Inbounds, st.Budgets.InboundBudget)
	if share := st.Budgets.InboundBudget - st.Budgets.InboundBudget/4; st.Budgets.Inbounds > share {
		t.Errorf("the inbounds hold %d connections; one guest's share is %d", st.Budgets.Inbounds, share)
	}
	out, code := s.curl(guest2, lab.EchoURL, "--socks5-hostname", "10.0.2.2:1080")
	if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the second guest through the inbound: exit %d, %q; want the proxy's exit %s", code, out, lab.ExitAddr)
	}
	body, code := s.curl(s.lab.Guest(), "http://"+lab.GatewayAddr+":47831/v1/models")
	if code != 0 || !strings.Contains(body, lab.ModelID) {
		t.Errorf("the model forward beside the flood: exit %d, %q", code, body)
	}
	if n, _ := refusalCount(s.status(), "limit"); n == 0 {
		t.Error("no limit refusals counted for the connections over the guest's share")
	}
}
