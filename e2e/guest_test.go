//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
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
	guest2 := s.secondGuest()
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
	// The router's accepts catch up: every connection held or refused (the checks below
	// say what is wrong if they do not).
	var st control.Status
	_ = wait.Poll(10*time.Second, func() bool {
		st = s.status()
		n, _ := refusalCount(st, "limit")
		return uint64(st.Budgets.Inbounds)+n >= uint64(len(conns))
	})
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

// TestUDPAssociationsPerGuest: one guest that takes 34 addresses of its network and opens 32
// UDP flows from each (1,088 sockets, each its own direct socket on the router, under the
// per-address bound of 32) used to take all 1,024 of the router's UDP sessions, and the
// second guest's datagrams were dropped. Now the first guest stops at its share and the
// second guest's UDP is answered.
func TestUDPAssociationsPerGuest(t *testing.T) {
	cfg := twoGuestConfig(lab.GoSocksUDPAddr, "")
	cfg = strings.Replace(cfg, "[[rule]]\nname = \"vm\"", "[[rule]]\nname = \"udp-echo-direct\"\nhosts = [\"203.0.113.10\"]\nports = [7]\naction = \"direct\"\n\n[[rule]]\nname = \"vm\"", 1)
	s := newLab(t, cfg)
	guest2 := s.secondGuest()
	if err := s.lab.StartGoSocksUDP(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range 34 {
		a := fmt.Sprintf("10.0.2.%d", 100+i)
		if out, code := run(s.ctx, s.lab.Guest(), "ip", "addr", "add", a+"/24", "dev", lab.GuestDev); code != 0 {
			t.Fatalf("ip addr add %s in the guest: exit %d, %s", a, code, out)
		}
		for range 32 {
			c, err := s.lab.Guest().DialFrom(s.ctx, "udp", a, lab.UDPEchoAddr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			c.Write([]byte("hold"))
		}
	}
	// The router opened the first guest's share of sockets: it refuses its flows past it.
	_ = wait.Poll(10*time.Second, func() bool { n, _ := refusalCount(s.status(), "limit"); return n > 0 })
	got, err := udpExchange(s.ctx, guest2, lab.UDPEchoAddr, 2*time.Second)
	if err != nil {
		got, err = udpExchange(s.ctx, guest2, lab.UDPEchoAddr, 2*time.Second)
	}
	if err != nil {
		t.Errorf("the second guest's UDP beside 1,088 flows of the first: %v; want an answer", err)
	}
	n, _ := refusalCount(s.status(), "limit")
	t.Logf("one guest, 34 addresses × 32 UDP flows: %d refused over its share; the second guest's echo %q", n, got)
	if n == 0 {
		t.Error("no limit refusals for the flows over the first guest's share")
	}
}

// TestReloadEndsLiveFlows: a reload that blocks a live UDP flow (the guest keeps sending)
// ends it at once: its datagrams stop reaching the echo. One that narrows an inbound's allow
// ends the tunnel of the client it no longer names.
func TestReloadEndsLiveFlows(t *testing.T) {
	inbound := `
[[inbound]]
name = "guest-socks"
listen = "10.0.2.2:1080"
allow = ["10.0.2.0/24"]
`
	cfg := config(lab.GoSocksUDPAddr, inbound)
	s := udpScene(t, cfg)
	c, err := s.lab.Guest().Dial(s.ctx, "udp", lab.UDPEchoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoed := func() bool {
		c.Write([]byte("ping"))
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 256))
		return err == nil
	}
	if ok := echoed(); !ok && !echoed() { // a second try: loopback UDP may drop one
		t.Fatal("no echo before the reload")
	}
	// A tunnel through the inbound that stays open, sending nothing.
	tunnel, err := s.lab.Guest().Dial(s.ctx, "tcp", "10.0.2.2:1080")
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.Close()
	tunnel.SetDeadline(time.Now().Add(10 * time.Second))
	// CONNECT to the HTTP echo (EchoURL: 203.0.113.10 port 80) by address.
	req := []byte{5, 1, 0, 5, 1, 0, 1, 203, 0, 113, 10, 0, 80}
	tunnel.Write(req)
	rep := make([]byte, 2+10)
	if _, err := io.ReadFull(tunnel, rep); err != nil || rep[3] != 0 {
		t.Fatalf("socks5 through the inbound: %v, reply %x", err, rep)
	}

	blocked := strings.Replace(cfg, "[[rule]]\nname = \"vm\"", "[[rule]]\nname = \"no-udp-echo\"\nhosts = [\"203.0.113.10\"]\nports = [7]\naction = \"block\"\n\n[[rule]]\nname = \"vm\"", 1)
	blocked = strings.Replace(blocked, `allow = ["10.0.2.0/24"]`, `allow = ["10.0.2.200/32"]`, 1)
	s.writeConfig(blocked)
	reload(s)
	if echoed() {
		t.Error("after the reload that blocks it, the live UDP flow still reaches the echo")
	}
	tunnel.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := tunnel.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the tunnel of a client the inbound no longer allows: %v; want it ended", err)
	}
	s.waitLog(`rule=no-udp-echo flows=1`, 5*time.Second)
	s.waitLog(`inbound=guest-socks flows=1`, 5*time.Second)
}

// TestIdleInboundsUnderLowNofile: under nofile = 3000 a guest fills its share of the
// transparent flows, then opens 1,024 idle connections to an inbound. Inbound connections
// used to be outside every budget; now the inbounds hold at most their share (64
// connections under 3,000 descriptors), and the model forward, the other guest's flows and
// `router status` keep working. (This lab does not bring the old code to its limit: the
// guest's dials stop at some 600 inbound connections; the unit test
// TestIdleInboundsInTheirBudget counts the budget itself.)
func TestIdleInboundsUnderLowNofile(t *testing.T) {
	inbound := `
[[inbound]]
name = "guest-socks"
listen = "10.0.2.2:1080"
allow = ["10.0.2.0/24"]
`
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, inbound))
	guest2 := s.secondGuest()
	r, err := s.lab.StartRouterWithDescriptors(routerBin, s.cfg, 15*time.Second, 3000)
	if err != nil {
		t.Fatal(err)
	}
	s.router = r
	flows := s.hold(s.lab.Guest(), 1200, func(int) string { return lab.ServiceAddr + ":80" })
	inbounds := s.hold(s.lab.Guest(), 1024, func(int) string { return "10.0.2.2:1080" })
	// The router's accepts catch up: every connection held or refused.
	var st control.Status
	_ = wait.Poll(10*time.Second, func() bool {
		st = s.status()
		n, _ := refusalCount(st, "limit")
		return uint64(st.Budgets.Flows+st.Budgets.Inbounds)+n >= uint64(flows+inbounds)
	})
	t.Logf("nofile 3000: the guest held %d transparent and %d inbound connections; the router holds flows %d of %d, inbound connections %d of %d",
		flows, inbounds, st.Budgets.Flows, st.Budgets.FlowBudget, st.Budgets.Inbounds, st.Budgets.InboundBudget)
	if st.Budgets.Inbounds > st.Budgets.InboundBudget || st.Budgets.InboundBudget*2 > 3000/8 {
		t.Errorf("inbound connections %d of a budget of %d; want within a small share of 3,000 descriptors", st.Budgets.Inbounds, st.Budgets.InboundBudget)
	}
	s.wantQuick("under 1,024 idle inbound connections", guest2, time.Second)
	if out, code := s.routerCmd("status", "--config", s.cfg); code != 0 {
		t.Errorf("router status: exit %d\n%s", code, out)
	}
	if l := s.log(); strings.Contains(l, "too many open files") {
		t.Errorf("the router ran out of descriptors:\n%s", l)
	}
}
