package netaddr

import (
	"net"
	"net/netip"
	"testing"
)

func TestLastAddrAndRangePrefix(t *testing.T) {
	for _, tc := range []struct{ p, last string }{
		{"10.0.2.0/24", "10.0.2.255"}, {"0.0.0.0/0", "255.255.255.255"}, {"10.0.2.7/32", "10.0.2.7"},
		{"fe80::/10", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, {"10.0.2.9/24", "10.0.2.255"},
		{"10.0.0.0/13", "10.7.255.255"}, {"fd00::/64", "fd00::ffff:ffff:ffff:ffff"}, {"::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	} {
		p := netip.MustParsePrefix(tc.p)
		if got := LastAddr(p); got.String() != tc.last {
			t.Errorf("LastAddr(%s) = %s, want %s", p, got, tc.last)
		}
		if got, ok := RangePrefix(p.Masked().Addr(), LastAddr(p)); !ok || got != p.Masked() {
			t.Errorf("RangePrefix of %s = %v %v", p, got, ok)
		}
	}
	if _, ok := RangePrefix(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")); ok {
		t.Error("10.0.0.1-10.0.0.9 is no CIDR")
	}
}

func TestKey(t *testing.T) {
	a, b := KeyOf(netip.MustParseAddr("10.0.0.1")), KeyOf(netip.MustParseAddr("10.0.0.2"))
	if !a.Less(b) || a.Compare(b) != -1 || b.Compare(a) != 1 || a.Compare(a) != 0 {
		t.Error("order")
	}
	if n, ok := a.Next(); !ok || n != b {
		t.Errorf("Next = %v", n)
	}
	if p, ok := b.Prev(); !ok || p != a {
		t.Errorf("Prev = %v", p)
	}
	if _, ok := (Key{^uint64(0), ^uint64(0)}).Next(); ok {
		t.Error("Next past the end")
	}
	if _, ok := (Key{}).Prev(); ok {
		t.Error("Prev before the start")
	}
	if k, _ := (Key{0, ^uint64(0)}).Next(); k != (Key{1, 0}) {
		t.Errorf("carry: %v", k)
	}
}

func TestAddrPort(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 80}
	if got := AddrPort(tcp); got.String() != "10.0.0.1:80" {
		t.Errorf("got %v", got)
	}
	if got := AddrPort(&net.UnixAddr{}); got.IsValid() {
		t.Errorf("unix: %v", got)
	}
}
