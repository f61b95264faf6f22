package proc

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"testing"
)

// TestLookupUDPSelf: the owner of a UDP socket that sent a datagram is found from the
// datagram's addresses, whether the socket is connected, bound to one address or to any.
func TestLookupUDPSelf(t *testing.T) {
	want := selfInfo(t)
	f := NewLinuxFinder(LinuxFinderConfig{})
	remote := netip.MustParseAddrPort("127.0.0.2:9")
	for _, tc := range []struct {
		name    string
		open    func() (net.Conn, netip.AddrPort, error)
		network string
	}{
		{"connected", func() (net.Conn, netip.AddrPort, error) {
			c, err := net.Dial("udp", remote.String())
			if err != nil {
				return nil, netip.AddrPort{}, err
			}
			return c, c.LocalAddr().(*net.UDPAddr).AddrPort(), nil
		}, "udp"},
		{"unconnected on any address", func() (net.Conn, netip.AddrPort, error) {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{})
			if err != nil {
				return nil, netip.AddrPort{}, err
			}
			port := c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
			return c, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), nil
		}, "udp"},
		{"ipv6", func() (net.Conn, netip.AddrPort, error) {
			c, err := net.Dial("udp", "[::1]:9")
			if err != nil {
				return nil, netip.AddrPort{}, err
			}
			return c, c.LocalAddr().(*net.UDPAddr).AddrPort(), nil
		}, "udp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, local, err := tc.open()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := remote
			if local.Addr().Is6() {
				r = netip.MustParseAddrPort("[::1]:9")
			}
			got, err := f.LookupUDP(local, r)
			if err != nil {
				t.Fatalf("LookupUDP(%v, %v): %v", local, r, err)
			}
			if got.PID != want.PID || got.AppPath != want.AppPath {
				t.Errorf("LookupUDP = %+v, want %+v", got, want)
			}
		})
	}
	t.Run("closed", func(t *testing.T) {
		_, err := f.LookupUDP(netip.MustParseAddrPort("127.0.0.1:1"), remote)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("no socket: %v, want fs.ErrNotExist", err)
		}
	})
}
