package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/router/upstream/socks5"
)

// inboundText is an [[inbound]] of type typ on addr, allowing loopback.
func inboundText(typ string, addr netip.AddrPort) string {
	return fmt.Sprintf("[[inbound]]\nname = \"guest\"\ntype = %q\nlisten = %q\nallow = [\"127.0.0.0/8\"]\n", typ, addr)
}

// viaSOCKS asks a SOCKS5 inbound for dst and returns what dst says ("" when refused).
func viaSOCKS(t *testing.T, inbound, dst netip.AddrPort) string {
	t.Helper()
	return exchange(inbound, func(c net.Conn) (io.Reader, bool) {
		_, err := (&socks5.Client{}).Handshake(c, socks5.Addr{IP: dst.Addr(), Port: dst.Port()})
		return c, err == nil
	})
}

// viaHTTP asks an HTTP CONNECT inbound for dst and returns what dst says ("" when refused).
func viaHTTP(t *testing.T, inbound, dst netip.AddrPort) string {
	t.Helper()
	return exchange(inbound, func(c net.Conn) (io.Reader, bool) {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", dst)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		return br, err == nil && resp.StatusCode == http.StatusOK
	})
}

// TestInboundLifecycle: an inbound serves from the start; a reload that keeps its address
// keeps its socket and swaps its settings (here its protocol); one that drops it closes it;
// one that fails closes the socket it opened for a new inbound and keeps the running ones.
func TestInboundLifecycle(t *testing.T) {
	s := newScene(t)
	in := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
	s.write(s.text("127.0.0.0/8", inboundText("socks5", in)))
	pf := &capturetest.Platform{}
	d := s.daemon(pf, nil)
	s.start(d)
	// An inbound's client is caged: it reaches the model through the forward's address, which
	// judges the client the router carries there (the model's own address is off limits).
	if got := viaSOCKS(t, in, s.fwd); got != "model\n" {
		t.Fatalf("through the socks5 inbound: %q", got)
	}
	if got := viaSOCKS(t, in, s.target); got != "" {
		t.Errorf("the model's loopback address through the socks5 inbound: %q; want refused", got)
	}

	before := d.inbounds[in.String()]
	s.write(s.text("127.0.0.0/8", inboundText("http", in)))
	if err := d.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := d.inbounds[in.String()]; after == nil || after.ln != before.ln {
		t.Fatalf("the inbound's socket was replaced (%p → %p)", before, after)
	}
	if got := viaHTTP(t, in, s.fwd); got != "model\n" {
		t.Errorf("after the reload to http: %q", got)
	}

	// A failed reload that adds a second inbound.
	extra := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t))
	s.write(s.text("127.0.0.0/8", inboundText("http", in)+inboundText("socks5", extra)))
	pf.SetInstallError(errors.New("nft refused"))
	if err := d.reload(context.Background()); err == nil {
		t.Fatal("the reload did not fail")
	}
	wantFree(t, extra.String(), "the new inbound's socket leaked")
	if got := viaHTTP(t, in, s.fwd); got != "model\n" || len(d.inbounds) != 1 {
		t.Errorf("after a failed reload: %d inbounds, %q", len(d.inbounds), got)
	}

	pf.SetInstallError(nil)
	s.write(s.text("127.0.0.0/8", ""))
	if err := d.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(d.inbounds) != 0 {
		t.Errorf("%d inbounds after a reload that drops them", len(d.inbounds))
	}
	wantFree(t, in.String(), "the dropped inbound's socket is still open")
}
