package redirect

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
)

// TestOwnerTablesShareDumps: lookups asked while a dump runs wait for the next one and all
// share it: 20 concurrent lookups cost at most two dumps per protocol. A dump answers from
// both families: an IPv4 flow of a dual-stack socket is found in the IPv6 rows.
func TestOwnerTablesShareDumps(t *testing.T) {
	release := make(chan struct{})
	var dumps atomic.Int32
	rows := []socketRow{
		{local: netip.MustParseAddrPort("192.0.2.10:50000"), remote: netip.MustParseAddrPort("198.51.100.1:443"), state: 5, pid: 11},
		// A dual-stack socket's IPv4 connection, in the IPv6 table (addr16 unmaps it).
		{local: netip.AddrPortFrom(addr16(netip.MustParseAddr("::ffff:192.0.2.10").AsSlice()), 50001), remote: netip.AddrPortFrom(addr16(netip.MustParseAddr("::ffff:198.51.100.1").AsSlice()), 443), state: 5, pid: 22},
		// UDP sockets bound to any address: one IPv4, one dual-stack.
		{local: netip.MustParseAddrPort("0.0.0.0:5353"), pid: 33},
		{local: netip.MustParseAddrPort("[::]:5353"), pid: 44},
		{local: netip.MustParseAddrPort("[::]:6000"), pid: 55},
	}
	tbl := &ownerTables{dump: func(udp bool) ([]socketRow, error) {
		dumps.Add(1)
		<-release
		return rows, nil
	}}
	var wg sync.WaitGroup
	got := make([]uint32, 20)
	for i := range 20 {
		wg.Go(func() {
			pid, ok, err := tbl.owner(false, netip.MustParseAddrPort("192.0.2.10:50000"), netip.MustParseAddrPort("198.51.100.1:443"))
			if err != nil || !ok {
				t.Errorf("lookup %d: %v %v", i, ok, err)
			}
			got[i] = pid
		})
	}
	// All 20 wait on the dump under way (the count below says if they did not in time).
	_ = wait.Poll(5*time.Second, func() bool {
		tbl.mu.Lock()
		defer tbl.mu.Unlock()
		return tbl.st[0].waiting == 20
	})
	close(release)
	wg.Wait()
	if n := dumps.Load(); n < 1 || n > 2 {
		t.Errorf("%d dumps for 20 concurrent lookups, want 1 or 2", n)
	}
	for i, pid := range got {
		if pid != 11 {
			t.Errorf("lookup %d: pid %d, want 11", i, pid)
		}
	}
	for _, c := range []struct {
		udp           bool
		local, remote string
		want          uint32
	}{
		{false, "192.0.2.10:50001", "198.51.100.1:443", 22}, // IPv4 flow, IPv6 row
		{true, "192.0.2.10:5353", "", 33},                   // the IPv4 wildcard beats the dual-stack one
		{true, "[2001:db8::10]:5353", "", 44},               // and the reverse
		{true, "192.0.2.10:6000", "", 55},                   // only a dual-stack socket: it
	} {
		var remote netip.AddrPort
		if c.remote != "" {
			remote = netip.MustParseAddrPort(c.remote)
		}
		pid, ok, err := tbl.owner(c.udp, netip.MustParseAddrPort(c.local), remote)
		if err != nil || !ok || pid != c.want {
			t.Errorf("%s: pid %d %v %v, want %d", c.local, pid, ok, err, c.want)
		}
	}
}
