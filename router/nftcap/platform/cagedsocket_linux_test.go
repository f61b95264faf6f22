package platform

import (
	"io/fs"
	"net/netip"
	"syscall"
	"testing"

	"github.com/agentcage/router/conf"
)

// TestCagedSocket: a flow of this host is caged when the table can have taken it only from a
// caged socket (without local = true, or to this host's own addresses), and with local =
// true to another host when its socket carries the cage's mark (a caged process's child that
// runs another executable): the kernel's mark, not the owner's name, decides.
func TestCagedSocket(t *testing.T) {
	host := netip.MustParseAddr("192.0.2.10")
	hostHas := func(a netip.Addr) bool { return a == host }
	type sock struct {
		proto byte
		src   string
	}
	marks := map[sock]uint32{
		{syscall.IPPROTO_TCP, "192.0.2.10:40000"}: conf.CagedSocketMark,
		{syscall.IPPROTO_TCP, "192.0.2.10:40001"}: 0,
		{syscall.IPPROTO_UDP, "192.0.2.10:40002"}: conf.CagedSocketMark,
	}
	mark := func(proto byte, src, _ netip.AddrPort) (uint32, error) {
		m, ok := marks[sock{proto, src.String()}]
		if !ok {
			return 0, fs.ErrNotExist
		}
		return m, nil
	}
	for _, tc := range []struct {
		local    bool
		src, dst string
		want     bool
	}{
		{false, "192.0.2.10:40001", "198.51.100.1:443", true}, // without local only caged sockets are taken
		{true, "192.0.2.10:40001", "127.0.0.1:22", true},      // to the host: only caged sockets are taken
		{true, "192.0.2.10:40001", "192.0.2.10:22", true},
		{true, "192.0.2.10:40000", "198.51.100.1:443", true}, // marked TCP
		{true, "192.0.2.10:40002", "198.51.100.1:53", true},  // marked UDP
		{true, "192.0.2.10:40001", "198.51.100.1:443", false},
		{true, "192.0.2.10:40009", "198.51.100.1:443", false}, // no socket
		{false, "10.0.2.15:40000", "198.51.100.1:443", false}, // forwarded: a guest's, not a socket of this host
	} {
		if got := cagedSocket(tc.local, hostHas, mark, netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)); got != tc.want {
			t.Errorf("local %v, %s -> %s: %v, want %v", tc.local, tc.src, tc.dst, got, tc.want)
		}
	}
}
