package nftcap

import (
	"strings"
	"testing"
)

func TestValidateUDP(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func(s *Spec)
		want string
	}{
		{"typical", func(s *Spec) {}, ""},
		{"off", func(s *Spec) { s.UDPPort, s.UDPMark, s.UDPTable = 0, 0, 0 }, ""},
		{"udp is dns", func(s *Spec) { s.DNSPort = s.UDPPort }, "equals the dns port"},
		{"no mark", func(s *Spec) { s.UDPMark = 0 }, "non-zero udp mark"},
		{"mark is own", func(s *Spec) { s.UDPMark = s.Mark }, "router's own sockets"},
		{"main table", func(s *Spec) { s.UDPTable = 254 }, "table of our own"},
		{"no table", func(s *Spec) { s.UDPTable = 0 }, "table of our own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Table: "router", ListenerPort: 1, DNSPort: 2, Mark: 3, UDPPort: 4, UDPMark: 5, UDPTable: 100}
			tc.spec(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}
