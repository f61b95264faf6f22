package redirect

import (
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/windivert/packet"
)

// TestIPHelperLookupOwnSocket asks the real IP Helper tables (Windows, or Wine) for the
// owner of a loopback connection of this process.
func TestIPHelperLookupOwnSocket(t *testing.T) {
	c, _ := echotest.TCPPair(t)
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	remote := netip.MustParseAddrPort(c.RemoteAddr().String())
	h := NewIPHelper(nil)
	info, err := h.Lookup(packet.ProtoTCP, local, remote)
	if err != nil {
		t.Fatalf("Lookup(%v -> %v): %v", local, remote, err)
	}
	if info.PID != os.Getpid() {
		t.Errorf("owner PID %d, want this process %d", info.PID, os.Getpid())
	}
	conns, err := h.Connections()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cn := range conns {
		found = found || cn.Local == local && cn.Remote == remote && cn.PID == uint32(os.Getpid())
	}
	if !found {
		t.Errorf("Connections (%d) lacks %v -> %v", len(conns), local, remote)
	}
	// A bare UDP socket (Go's ListenPacket uses an ioctl that Wine lacks).
	us, err := windows.Socket(windows.AF_INET, windows.SOCK_DGRAM, windows.IPPROTO_UDP)
	if err != nil {
		t.Fatal(err)
	}
	defer windows.Closesocket(us)
	if err := windows.Bind(us, &windows.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := windows.Getsockname(us)
	if err != nil {
		t.Fatal(err)
	}
	ul := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(sa.(*windows.SockaddrInet4).Port))
	info, err = h.Lookup(packet.ProtoUDP, ul, netip.MustParseAddrPort("127.0.0.1:53"))
	// Wine 8 lists UDP sockets with owner PID 0 (the row is found, the layout is right).
	wine := windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
	if err != nil || info.PID != os.Getpid() && !(wine && info.PID == 0) {
		t.Errorf("UDP Lookup(%v) = %+v, %v; want this process (wine: %v)", ul, info, err, wine)
	}
}
