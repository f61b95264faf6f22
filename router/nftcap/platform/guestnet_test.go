package platform

import (
	"net/netip"
	"testing"
	"time"
)

// TestGuestNets: an address is a guest's when it lies in the subnet of an interface that a
// vm_interfaces entry names (exactly or by a trailing *), and the list is read again once
// it is older than the refresh period.
func TestGuestNets(t *testing.T) {
	now := time.Unix(1000, 0)
	lists := 0
	ifs := []ifaceNet{
		{name: "virbr0", nets: []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24")}},
		{name: "tap3", nets: []netip.Prefix{netip.MustParsePrefix("10.7.0.0/16"), netip.MustParsePrefix("fd00:7::/64")}},
		{name: "eth0", nets: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}},
	}
	g := &guestNets{list: func() ([]ifaceNet, error) { lists++; return ifs, nil }, now: func() time.Time { return now }}
	for _, tc := range []struct {
		ifaces []string
		addr   string
		want   bool
	}{
		{[]string{"virbr0"}, "192.168.122.40", true},
		{[]string{"virbr*"}, "192.168.122.40", true},
		{[]string{"virbr1"}, "192.168.122.40", false},
		{[]string{"tap*"}, "10.7.3.3", true},
		{[]string{"tap*"}, "fd00:7::9", true},
		{[]string{"tap*"}, "::ffff:10.7.3.3", true},
		{[]string{"tap*"}, "198.51.100.9", false},
		{nil, "192.168.122.40", false},
	} {
		if got := g.Has(tc.ifaces, netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Has(%v, %s) = %v, want %v", tc.ifaces, tc.addr, got, tc.want)
		}
	}
	if lists != 1 {
		t.Errorf("the list was read %d times within one period, want 1", lists)
	}
	ifs = append(ifs, ifaceNet{name: "virbr1", nets: []netip.Prefix{netip.MustParsePrefix("192.168.123.0/24")}})
	now = now.Add(time.Second)
	if !g.Has([]string{"virbr*"}, netip.MustParseAddr("192.168.123.9")) {
		t.Error("an interface that appeared is not known after a period")
	}
}

// TestGuestNetsConcurrent: questions from many goroutines while the list is read again
// (run with -race).
func TestGuestNetsConcurrent(t *testing.T) {
	ifs := []ifaceNet{{name: "virbr0", nets: []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24")}}}
	g := &guestNets{list: func() ([]ifaceNet, error) { return ifs, nil }, refresh: time.Nanosecond}
	done := make(chan bool)
	for range 8 {
		go func() {
			ok := true
			for range 200 {
				ok = ok && g.Has([]string{"virbr*"}, netip.MustParseAddr("192.168.122.9"))
			}
			done <- ok
		}()
	}
	for range 8 {
		if !<-done {
			t.Error("a question missed the interface's subnet")
		}
	}
}
