package nftcap

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
)

// show renders interval elements as nft --debug=netlink would list them: "start", "end-".
func show(elems []nftables.SetElement) string {
	var b []string
	for _, e := range elems {
		a, _ := netip.AddrFromSlice(e.Key)
		if e.IntervalEnd {
			b = append(b, fmt.Sprintf("%v)", a))
		} else {
			b = append(b, fmt.Sprintf("[%v", a))
		}
	}
	return strings.Join(b, " ")
}

func TestIntervalElements(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		in   []string
		want string
	}{
		{"none", false, nil, ""},
		{"one", false, []string{"10.0.2.0/24"}, "0.0.0.0) [10.0.2.0 10.0.3.0)"},
		{"sorted and merged", false, []string{"10.0.3.0/24", "10.0.2.0/24", "10.0.2.128/25", "192.168.0.0/16"},
			"0.0.0.0) [10.0.2.0 10.0.4.0) [192.168.0.0 192.169.0.0)"},
		{"top of the space has no end", false, []string{"255.255.255.255/32", "127.0.0.0/8"},
			"0.0.0.0) [127.0.0.0 128.0.0.0) [255.255.255.255"},
		{"starts at zero", false, []string{"0.0.0.0/8"}, "[0.0.0.0 1.0.0.0)"},
		{"everything", false, []string{"0.0.0.0/0", "10.0.0.0/8"}, "[0.0.0.0"},
		{"ipv6", true, []string{"ff00::/8", "::1/128", "::/128"}, "[:: ::2) [ff00::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []netip.Prefix
			for _, s := range tc.in {
				ps = append(ps, netip.MustParsePrefix(s))
			}
			if got := show(intervalElements(tc.v6, ps)); got != tc.want {
				t.Errorf("intervalElements(%v) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseSockaddr(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string // "" means an error
	}{
		{"ipv4", []byte{2, 0, 0x1f, 0x90, 198, 51, 100, 2, 0, 0, 0, 0, 0, 0, 0, 0}, "198.51.100.2:8080"},
		{"ipv6", append([]byte{10, 0, 1, 187, 0, 0, 0, 0}, append(netip.MustParseAddr("2001:db8::1").AsSlice(), 0, 0, 0, 0)...), "[2001:db8::1]:443"},
		{"ipv6 mapped is unmapped", append([]byte{10, 0, 0, 80, 0, 0, 0, 0}, append(netip.MustParseAddr("::ffff:10.0.0.1").AsSlice(), 0, 0, 0, 0)...), "10.0.0.1:80"},
		{"short ipv4", []byte{2, 0, 0, 80, 1, 2}, ""},
		{"short ipv6", []byte{10, 0, 0, 80, 0, 0, 0, 0, 1}, ""},
		{"empty", nil, ""},
		{"unknown family", []byte{1, 0, 0, 0, 0, 0, 0, 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSockaddr(tc.b)
			if tc.want == "" {
				if err == nil {
					t.Errorf("parseSockaddr = %v, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("parseSockaddr = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// FuzzParseSockaddr: whatever bytes getsockopt hands back, parsing never panics and a
// success is a valid address.
func FuzzParseSockaddr(f *testing.F) {
	f.Add([]byte{2, 0, 0x1f, 0x90, 198, 51, 100, 2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(append([]byte{10, 0, 1, 187, 0, 0, 0, 0}, make([]byte, 20)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		ap, err := parseSockaddr(b)
		if err == nil && !ap.IsValid() {
			t.Fatalf("parseSockaddr(%x) = invalid %v without error", b, ap)
		}
	})
}
