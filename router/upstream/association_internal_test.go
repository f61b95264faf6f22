package upstream

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/upstream/socks5"
)

// TestAssociationDrops runs an association against a relay played by the
// test: datagrams with FRAG set or a broken header are dropped, datagrams
// from any address but the relay's never arrive, and a byte on the control
// connection ends the association.
func TestAssociationDrops(t *testing.T) {
	if !winetest.UDPUsable(t) {
		return // logged; the fail-closed path is asserted by the tests of udp_test.go
	}
	relay, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	relayAP := relay.LocalAddr().(*net.UDPAddr).AddrPort()
	uc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(relayAP))
	if err != nil {
		t.Fatal(err)
	}
	ctrl, proxySide := net.Pipe()
	defer proxySide.Close()
	a := newAssociation("exit", ctrl, uc, relayAP, slog.New(slog.DiscardHandler))
	defer a.Close()
	_ = relay.SetDeadline(time.Now().Add(10 * time.Second))
	_ = uc.SetDeadline(time.Now().Add(10 * time.Second))

	// What the client sends: the header, then the payload, in one datagram.
	dst := Addr{Name: "example.com", IP: netip.MustParseAddr("198.18.0.1"), Port: 53}
	if _, err := a.WriteTo([]byte("query"), dst); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	buf := make([]byte, 2048)
	n, client, err := relay.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("relay read: %v", err)
	}
	if want := "\x00\x00\x00\x03\x0bexample.com\x00\x35query"; string(buf[:n]) != want {
		t.Errorf("relay got %q, want %q", buf[:n], want)
	}

	hdr := func(frag byte) []byte {
		b, _ := socks5.AppendUDPHeader(nil, Addr{IP: netip.MustParseAddr("192.0.2.53"), Port: 53})
		b[2] = frag
		return b
	}
	send := func(b []byte) {
		t.Helper()
		if _, err := relay.WriteToUDPAddrPort(b, client); err != nil {
			t.Fatalf("relay write: %v", err)
		}
	}
	send(append(hdr(1), "fragment 1"...))
	send(append(hdr(0x81), "last fragment"...))
	send([]byte{0, 0, 0, 9, 1, 2})
	send([]byte{0})
	other, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.WriteToUDPAddrPort(append(hdr(0), "spoofed"...), client); err != nil {
		t.Fatal(err)
	}
	send(append(hdr(0), "answer"...))
	n, src, err := a.ReadFrom(buf)
	if err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	if string(buf[:n]) != "answer" || src != (Addr{IP: netip.MustParseAddr("192.0.2.53"), Port: 53}) {
		t.Errorf("ReadFrom = %q from %v, want the answer from 192.0.2.53:53", buf[:n], src)
	}

	// The proxy must send nothing on the control connection: a byte ends
	// the association.
	go func() { _, _ = proxySide.Write([]byte{0x42}) }()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("association alive after a byte on its control connection")
	}
	if err := a.Err(); !errors.Is(err, ErrAssociationLost) || !strings.Contains(err.Error(), "proxy sent 0x42 on it") {
		t.Errorf("Err() = %v", err)
	}
}
