//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/router/upstream/socks5"
)

// wallInbounds are the explicit proxies of the walls' scene: for the whole guest network,
// so that a guest source the model's forward refuses (10.0.2.16) can still use them, and
// the host's own VM-facing address (10.0.2.2) is among their allowed sources, as in the
// Hyper-V internal switch recipe; and one on the host's loopback for its own tools, which
// the guests' may reach only through the guests' inbound, by its exact address and port.
const wallInbounds = `
[[inbound]]
name = "guest-socks"
listen = "10.0.2.2:1080"
allow = ["10.0.2.0/24"]

[[inbound]]
name = "guest-http"
type = "http"
listen = "10.0.2.2:3128"
allow = ["10.0.2.0/24"]

[[inbound]]
name = "host-socks"
listen = "127.0.0.1:1081"
allow = ["127.0.0.0/8", "10.0.2.0/24"]
`

// homeRule sends the names of a corporate zone direct, as a user would for an intranet:
// the lab's HomeZone, whose names lead to the host and to the other guest.
const homeRule = `[[rule]]
name = "corp"
hosts = ["*.` + lab.HomeZone + `"]
action = "direct"

`

// wallConfig is the scene's config with the inbounds, the second guest's network caged, the
// corporate direct rule before the VM's, and the VM's rule for every caged flow (caged =
// true, as the Hyper-V recipe writes it) rather than by source: a flow that lost its caged
// identity would fall to the default direct rule.
func wallConfig() string {
	cfg := config(lab.GoSocksAddr, wallInbounds)
	cfg = strings.Replace(cfg, `vm_networks = ["10.0.2.0/24"]`, `vm_networks = ["10.0.2.0/24", "`+lab.SecondGuestNetwork+`"]`, 1)
	cfg = strings.Replace(cfg, "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]", homeRule+"[[rule]]\nname = \"vm\"\ncaged = true", 1)
	if !strings.Contains(cfg, "caged = true") {
		panic("the scene's VM rule moved: wallConfig no longer applies")
	}
	return cfg
}

// tcpService serves reply on address in ns until the test ends and counts its connections.
func (s *scene) tcpService(ns *lab.Netns, address, reply string) *atomic.Int32 {
	return s.service(ns, address, func(c net.Conn) { c.Write([]byte(reply)) })
}

// udpService counts the datagrams that reach address in ns until the test ends.
func (s *scene) udpService(ns *lab.Netns, address string) *atomic.Int32 {
	s.t.Helper()
	pc, err := ns.ListenPacket(s.ctx, "udp", address)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { pc.Close() })
	n := new(atomic.Int32)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return n
}

// sendGuestUDP sends a few datagrams from the guest to dst.
func (s *scene) sendGuestUDP(dst string) {
	s.t.Helper()
	c, err := s.lab.Guest().Dial(s.ctx, "udp", dst)
	if err != nil {
		s.t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		c.Write([]byte("ping"))
		time.Sleep(30 * time.Millisecond) // not ordering: a paced sender, a few datagrams apart
	}
}

// refusals are the router's refusal counts by reason.
func refusals(st control.Status) map[string]uint64 {
	m := map[string]uint64{}
	for _, r := range st.Refusals {
		m[r.Reason] = r.Count
	}
	return m
}

// socksChain asks the SOCKS5 inbound, from the guest, for each hop in turn on one
// connection, then GETs the echo page through the last: it returns the page (the address
// the echo server saw).
func (s *scene) socksChain(hops ...socks5.Addr) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	c, err := s.lab.Guest().Dial(ctx, "tcp", "10.0.2.2:1080")
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, h := range hops {
		if _, err := (&socks5.Client{}).Handshake(c, h); err != nil {
			return "", fmt.Errorf("CONNECT %v: %w", h, err)
		}
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", lab.EchoName)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// TestHostWalls: the host and the other guests are off limits on every path. Through the
// SOCKS5 and HTTP inbounds: the host's loopback (127.0.0.1, [::1], 0.0.0.0, localhost) on
// an inbound's port, the uplink address on the forward's port, the model's loopback
// target; names a direct rule takes that resolve to loopback, 0.0.0.0, ::1, link-local,
// the host's uplink or another guest, over TCP (the inbounds) and UDP (the transparent
// path): each refused and counted (host-off-limits, to-guest), nothing reached. A chain
// of inbounds stays caged (it exits through the proxy); the model forward works for its
// allowed source, directly and through an inbound, and for no other; the leak counter
// stays 0.
func TestHostWalls(t *testing.T) {
	s := newLab(t, wallConfig())
	guest2 := s.secondGuest()
	for _, args := range [][]string{
		{"addr", "add", lab.MetadataAddr + "/32", "dev", "lo"},
	} {
		if out, code := run(s.ctx, s.lab.Host(), "ip", args...); code != 0 {
			t.Fatalf("ip %v: %s", args, out)
		}
	}
	if out, code := run(s.ctx, s.lab.Guest(), "ip", "addr", "add", "10.0.2.16/24", "dev", lab.GuestDev); code != 0 {
		t.Fatalf("add address: %s", out)
	}
	s.startRouter()

	const reply = "HTTP/1.0 200 OK\r\n\r\nhost service\n"
	hostTCP := s.tcpService(s.lab.Host(), ":2222", reply) // every address of the host, both families
	hostLoop4 := s.tcpService(s.lab.Host(), "127.0.0.1:1080", reply)
	hostLoop6 := s.tcpService(s.lab.Host(), "[::1]:1080", reply)
	hostUplink := s.tcpService(s.lab.Host(), lab.HostUplinkAddr+":47831", reply)
	hostUDP := s.udpService(s.lab.Host(), ":2223")
	guest2TCP := s.tcpService(guest2, ":2222", reply)
	guest2UDP := s.udpService(guest2, ":2223")
	reached := func(what string) {
		t.Helper()
		time.Sleep(50 * time.Millisecond) // not ordering: a window for a connection or datagram that must not come; no event says none will
		for name, n := range map[string]*atomic.Int32{"the host's :2222": hostTCP, "127.0.0.1:1080": hostLoop4, "[::1]:1080": hostLoop6,
			"the uplink's :47831": hostUplink, "the host's UDP :2223": hostUDP, "the other guest's :2222": guest2TCP, "the other guest's UDP :2223": guest2UDP} {
			if v := n.Load(); v != 0 {
				t.Errorf("%s: %s was reached %d times", what, name, v)
			}
		}
	}

	socks := []string{"--socks5-hostname", "10.0.2.2:1080"}
	web := []string{"--proxytunnel", "--proxy", "http://10.0.2.2:3128"}
	before := refusals(s.status())
	refused := 0
	for _, via := range []struct {
		name string
		args []string
	}{{"socks5", socks}, {"http", web}} {
		urls := []string{
			"http://127.0.0.1:1080/", "http://[::1]:1080/", "http://0.0.0.0:1080/", "http://localhost:1080/",
			"http://" + lab.HostUplinkAddr + ":47831/", "http://127.0.0.1:2222/", "http://10.0.2.2:2222/",
			"http://" + lab.MetadataAddr + ":2222/",
		}
		for name := range lab.HomeNames {
			urls = append(urls, "http://"+name+":2222/")
		}
		for _, url := range urls {
			if out, code := s.curl(s.lab.Guest(), url, via.args...); code == 0 || strings.Contains(out, "host service") {
				t.Errorf("%s through the %s inbound: exit %d, %q; want refused", url, via.name, code, out)
			}
			refused++
		}
	}
	reached("through the inbounds")

	// UDP: a name the direct rule takes, behind its fake IP, on the transparent path.
	for name := range lab.HomeNames {
		s.sendGuestUDP(net.JoinHostPort(s.fakeIP(name), "2223"))
	}
	// Another guest by address, TCP and UDP (the VM's proxy rule takes it: no rule names it).
	s.sendGuestUDP(lab.SecondGuestAddr + ":2223")
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.SecondGuestAddr+":2222/"); gotThrough(out, code) {
		t.Errorf("the other guest by address: %q; want refused", out)
	}
	reached("by name and to the other guest")

	// The model: the forward's allowed source, directly and through the inbound (the router
	// carries it, and the forward judges the guest); another source neither way, nor the
	// model's loopback target through the inbound.
	models := "http://10.0.2.2:47831/v1/models"
	if out, code := s.curl(s.lab.Guest(), models); code != 0 || !strings.Contains(out, lab.ModelID) {
		t.Errorf("the model from its allowed source: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), models, socks...); code != 0 || !strings.Contains(out, lab.ModelID) {
		t.Errorf("the model through the inbound from its allowed source: exit %d, %q", code, out)
	}
	other := []string{"--interface", "10.0.2.16"}
	for _, args := range [][]string{other, append(other, socks...), append(other, web...)} {
		for _, url := range []string{models, "http://127.0.0.1:47831/v1/models"} {
			if out, code := s.curl(s.lab.Guest(), url, args...); code == 0 || strings.Contains(out, lab.ModelID) {
				t.Errorf("%s from a source the forward refuses, %v: exit %d, %q; want refused", url, args, code, out)
			}
		}
	}

	// A chain of inbounds is as caged as its first hop: it leaves through the proxy.
	s.lab.ResetLogs()
	echo := socks5.Addr{Name: lab.EchoName, Port: 80}
	inbound := socks5.Addr{IP: netip.MustParseAddr("10.0.2.2"), Port: 1080}
	if got, err := s.socksChain(inbound, echo); err != nil || got != lab.ExitAddr {
		t.Errorf("socks5 into socks5: %q, %v; want the proxy's exit %s", got, err, lab.ExitAddr)
	}
	if got, err := s.socksChain(inbound, inbound, echo); err != nil || got != lab.ExitAddr {
		t.Errorf("socks5 into socks5 into socks5: %q, %v; want the proxy's exit %s", got, err, lab.ExitAddr)
	}
	// Into the host's loopback inbound: its second hop comes from 127.0.0.1, this host.
	hostInbound := socks5.Addr{IP: netip.MustParseAddr("127.0.0.1"), Port: 1081}
	if got, err := s.socksChain(hostInbound, echo); err != nil || got != lab.ExitAddr {
		t.Errorf("socks5 into the host's loopback inbound: %q, %v; want the proxy's exit %s", got, err, lab.ExitAddr)
	}
	out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/", "--preproxy", "socks5h://10.0.2.2:1080", "--proxy", "http://10.0.2.2:3128", "--proxytunnel")
	if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("socks5 into the http inbound: exit %d, %q; want the proxy's exit %s", code, out, lab.ExitAddr)
	}
	for _, r := range s.lab.HTTPLog() {
		if r.Remote.Addr().String() != lab.ExitAddr {
			t.Errorf("the echo server saw %v", r)
		}
	}

	after := refusals(s.status())
	if d := after["host-off-limits"] - before["host-off-limits"]; d < uint64(refused) {
		t.Errorf("host-off-limits counted %d more, want at least %d (%v)", d, refused, after)
	}
	if d := after["to-guest"] - before["to-guest"]; d < 4 {
		t.Errorf("to-guest counted %d more, want at least 4: the other guest by name and by address, TCP and UDP (%v)", d, after)
	}
	s.wantNoLeak("the host walls")
	t.Logf("refusals: %v", after)
}
