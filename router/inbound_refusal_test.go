package router

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/refusal"
)

// TestInboundEveryRefusalCounted: each malformed request to an inbound (or one asking for
// what an inbound does not serve) is counted as inbound-malformed and logged; most left no
// count and no log. DNS asked of an inbound is inbound-dns, not a capture fault.
func TestInboundEveryRefusalCounted(t *testing.T) {
	target := startTarget(t, "x")
	e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Direct})}, Options{})
	socksAddr := e.startInbound(Inbound{Type: InboundSOCKS5})
	httpAddr := e.startInbound(Inbound{Type: InboundHTTP})
	port := target.Port()
	socksReq := func(cmd byte, rest string) string { return "\x05\x01\x00\x05" + string([]byte{cmd}) + "\x00" + rest }
	ipv4 := fmt.Sprintf("\x01\x7f\x00\x00\x01%c%c", byte(port>>8), byte(port))
	cases := []struct {
		name string
		addr netip.AddrPort
		send string
	}{
		{"socks4 greeting", socksAddr, "\x04\x01\x00\x50\x7f\x00\x00\x01\x00"},
		{"no methods", socksAddr, "\x05\x00"},
		{"greeting cut", socksAddr, "\x05"},
		{"bad request version", socksAddr, "\x05\x01\x00\x04\x01\x00" + ipv4},
		{"bind", socksAddr, socksReq(2, ipv4)},
		{"udp associate", socksAddr, socksReq(3, ipv4)},
		{"unknown command", socksAddr, socksReq(9, ipv4)},
		{"bad address type", socksAddr, socksReq(1, "\x07\x00\x00")},
		{"request cut", socksAddr, socksReq(1, "\x01\x7f")},
		{"literal name", socksAddr, socksReq(1, "\x03\x05127.1"+string([]byte{byte(port >> 8), byte(port)}))},
		{"port 0", socksAddr, socksReq(1, "\x01\x7f\x00\x00\x01\x00\x00")},
		{"get", httpAddr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"garbage", httpAddr, "\x16\x03\x01\x00\x01\x01\r\n\r\n"},
		{"connect no port", httpAddr, "CONNECT example.com HTTP/1.1\r\n\r\n"},
		{"connect path", httpAddr, "CONNECT /x HTTP/1.1\r\n\r\n"},
		{"connect bad port", httpAddr, "CONNECT example.com:99999 HTTP/1.1\r\n\r\n"},
		{"connect userinfo", httpAddr, "CONNECT u@example.com:443 HTTP/1.1\r\n\r\n"},
		{"head too large", httpAddr, "CONNECT example.com:443 HTTP/1.1\r\nX: " + strings.Repeat("a", inboundHeadMax) + "\r\n\r\n"},
		{"head cut", httpAddr, "CONNECT example.com:443 HTTP/1.1\r\n"},
	}
	for i, tc := range cases {
		c, err := net.Dial("tcp", tc.addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(waitFor))
		c.Write([]byte(tc.send))
		if cw, ok := c.(*net.TCPConn); ok {
			cw.CloseWrite()
		}
		c.Read(make([]byte, 1<<10))
		c.Close()
		_ = wait.Poll(waitFor, func() bool { return e.r.book.Count(refusal.Malformed) >= uint64(i+1) })
		if n := e.r.book.Count(refusal.Malformed); n != uint64(i+1) {
			t.Errorf("%s: inbound-malformed %d; want %d", tc.name, n, i+1)
		}
	}
	e.waitLog("inbound request refused: malformed")

	// DNS through the inbound: its own reason.
	c, code := e.socksConnect(socksAddr, socks5.Addr{IP: netip.MustParseAddr("192.0.2.53"), Port: 53})
	c.Close()
	if code != 0x02 {
		t.Errorf("DNS through the inbound: reply %#02x; want 0x02", code)
	}
	waitCount(t, e.r.book, refusal.InboundDNS, 1)
	if n := e.r.book.Count(refusal.Capture); n != 0 {
		t.Errorf("DNS through the inbound counted %d capture faults; want none", n)
	}
}
