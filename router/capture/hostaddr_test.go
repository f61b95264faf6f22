package capture

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// TestHostAddrs: a hit is answered from the set read last; a miss reads the list again at
// most once per refresh period, so an address added since is found within a period; a list
// that fails keeps what was known; IPv4-mapped and zoned addresses are judged plain.
func TestHostAddrs(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("fe80::1")
	now := time.Unix(1000, 0)
	var reads atomic.Int32
	list := []netip.Addr{a}
	var fail bool
	h := &HostAddrs{
		List: func() ([]netip.Addr, error) {
			reads.Add(1)
			if fail {
				return nil, errors.New("no list")
			}
			return list, nil
		},
		Refresh: time.Second,
		Now:     func() time.Time { return now },
	}
	if !h.Has(netip.MustParseAddr("::ffff:192.0.2.1")) || reads.Load() != 1 {
		t.Fatalf("mapped address of the list: not found, or %d reads", reads.Load())
	}
	list = []netip.Addr{a, b}
	if h.Has(b.WithZone("eth0")) || reads.Load() != 1 {
		t.Errorf("within the period a miss must not read the list again (%d reads)", reads.Load())
	}
	now = now.Add(time.Second)
	if !h.Has(b.WithZone("eth0")) || reads.Load() != 2 {
		t.Errorf("after the period the new address is not found (%d reads)", reads.Load())
	}
	fail = true
	now = now.Add(time.Second)
	if h.Has(netip.MustParseAddr("198.51.100.1")) || !h.Has(a) {
		t.Error("a list that fails must keep what was known")
	}
}
