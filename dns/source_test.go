package dns

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/agentcage/router/rules"
)

func TestSourceKey(t *testing.T) {
	key := func(addr, app string) string {
		var a netip.Addr
		if addr != "" {
			a = netip.MustParseAddr(addr)
		}
		return Source{Addr: a, Owner: rules.Owner{App: app}}.key().String()
	}
	for _, tt := range []struct{ addr, app, want string }{
		{"", "", "unknown"},
		{"10.0.2.15", "", "10.0.2.15"},
		{"::ffff:10.0.2.15", "", "10.0.2.15"},
		{"fd00:1:2:3:aaaa::1", "", "fd00:1:2:3::/64"},
		{"fd00:1:2:3:bbbb::2", "", "fd00:1:2:3::/64"},
		{"fe80::1%eth0", "", "fe80::/64"},
		{"10.0.2.15", "VBoxHeadless.EXE", "vboxheadless.exe@10.0.2.15"},
		{"", "qemu", "qemu@unknown"},
	} {
		if got := key(tt.addr, tt.app); got != tt.want {
			t.Errorf("key(%q, %q) = %q, want %q", tt.addr, tt.app, got, tt.want)
		}
	}
	if k := (Source{Owner: rules.Owner{App: strings.Repeat("x", 5000)}}).key(); len(k.app) != maxAppKey {
		t.Errorf("app key of %d bytes, want %d", len(k.app), maxAppKey)
	}
	for a, want := range map[net.Addr]string{
		&net.UDPAddr{IP: net.IPv4(10, 0, 2, 15), Port: 5353}:  "10.0.2.15",
		&net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 1}: "2001:db8::7",
		&net.UnixAddr{Name: "@x", Net: "unix"}:                "invalid IP",
	} {
		if got := sourceOf(a).Addr.String(); got != want {
			t.Errorf("sourceOf(%v) = %s, want %s", a, got, want)
		}
	}
	if got := sourceOf(nil); !reflect.DeepEqual(got, Source{}) {
		t.Errorf("sourceOf(nil) = %v", got)
	}
}
