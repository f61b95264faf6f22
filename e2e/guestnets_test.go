//go:build linux

package e2e

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
)

// inboundGuestConfig is the walls' scene with the second guest known to the router only as
// the client of an inbound on its own VM-facing address (allow = its network), not in
// vm_networks: a guest's network all the same.
func inboundGuestConfig() string {
	inbound := wallInbounds + `
[[inbound]]
name = "guest2-socks"
listen = "` + lab.SecondGatewayAddr + `:1080"
allow = ["` + lab.SecondGuestNetwork + `"]
`
	cfg := config(lab.GoSocksAddr, inbound)
	cfg = strings.Replace(cfg, "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]", homeRule+"[[rule]]\nname = \"vm\"\ncaged = true", 1)
	if !strings.Contains(cfg, "caged = true") || strings.Contains(cfg, `vm_networks = ["10.0.2.0/24", `) {
		panic("the scene's config moved: inboundGuestConfig no longer applies")
	}
	return cfg
}

// interfaceGuestConfig is the walls' scene with the second guest known to the router only
// by its VM-facing interface (vm_interfaces), whose subnet is not in vm_networks.
func interfaceGuestConfig() string {
	cfg := config(lab.GoSocksAddr, wallInbounds)
	cfg = strings.Replace(cfg, `vm_networks = ["10.0.2.0/24"]`, `vm_networks = ["10.0.2.0/24"]
vm_interfaces = ["`+lab.SecondHostDev+`"]`, 1)
	cfg = strings.Replace(cfg, "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]", homeRule+"[[rule]]\nname = \"vm\"\ncaged = true", 1)
	if !strings.Contains(cfg, "caged = true") || !strings.Contains(cfg, "vm_interfaces") {
		panic("the scene's config moved: interfaceGuestConfig no longer applies")
	}
	return cfg
}

// TestGuestNetworkFromAnInbound: a direct rule by name (*.home.lab.test) whose name leads
// to a guest the router knows only from an inbound's allow list does not carry the first
// guest there: not through the inbounds, not behind the name's fake IP on the transparent
// TCP and UDP paths. Each is refused and counted as to-guest; the second guest is never
// reached, and still uses its own inbound.
func TestGuestNetworkFromAnInbound(t *testing.T) {
	s := newLab(t, inboundGuestConfig())
	guest2 := guestWalled(t, s)
	// The second guest still reaches the world through its own inbound.
	if out, code := s.curl(guest2, lab.EchoURL, "--socks5-hostname", lab.SecondGatewayAddr+":1080"); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("the second guest through its inbound: exit %d, %q; want the proxy's exit %s", code, out, lab.ExitAddr)
	}
	s.wantNoLeak("a guest known from an inbound")
}

// TestGuestNetworkFromAnInterface: the same, for a guest the router knows only by its
// VM-facing interface (vm_interfaces): the interface's subnet is a guest's network.
func TestGuestNetworkFromAnInterface(t *testing.T) {
	s := newLab(t, interfaceGuestConfig())
	guestWalled(t, s)
	s.wantNoLeak("a guest known from its interface")
}

// guestWalled adds the second guest, starts the router and checks that the first guest
// cannot reach it by the direct rule's name, on any path; it returns the second guest.
func guestWalled(t *testing.T, s *scene) *lab.Netns {
	t.Helper()
	guest2 := s.secondGuest()
	s.startRouter()
	const reply = "HTTP/1.0 200 OK\r\n\r\nguest2 service\n"
	tcp := s.tcpService(guest2, ":2222", reply)
	udp := s.udpService(guest2, ":2223")
	name := "guest2." + lab.HomeZone
	if lab.HomeNames[name] != lab.SecondGuestAddr {
		t.Fatalf("the lab's %s leads to %q, not the second guest", name, lab.HomeNames[name])
	}
	before := refusals(s.status())
	url := "http://" + name + ":2222/"
	for _, via := range [][]string{
		{"--socks5-hostname", "10.0.2.2:1080"},
		{"--proxytunnel", "--proxy", "http://10.0.2.2:3128"},
		nil, // the guest's own DNS: the name's fake IP, the transparent path
	} {
		if out, code := s.curl(s.lab.Guest(), url, via...); gotThrough(out, code) || strings.Contains(out, "guest2 service") {
			t.Errorf("%s %v: exit %d, %q; want refused", url, via, code, out)
		}
	}
	s.sendGuestUDP(net.JoinHostPort(s.fakeIP(name), "2223"))
	// The UDP flow is decided once its name is resolved: wait for its refusal.
	_ = wait.Poll(3*time.Second, func() bool { return refusals(s.status())["to-guest"]-before["to-guest"] >= 4 })
	for what, n := range map[string]*atomic.Int32{"TCP :2222": tcp, "UDP :2223": udp} {
		if v := n.Load(); v != 0 {
			t.Errorf("the second guest's %s was reached %d times", what, v)
		}
	}
	if d := refusals(s.status())["to-guest"] - before["to-guest"]; d < 4 {
		t.Errorf("to-guest counted %d more, want at least 4: the name through both inbounds and behind its fake IP, TCP and UDP", d)
	}
	return guest2
}
