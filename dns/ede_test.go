package dns

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/rules/refusal"
)

// edeOf returns the Extended DNS Errors of m.
func edeOf(m *mdns.Msg) []*mdns.EDNS0_EDE {
	var out []*mdns.EDNS0_EDE
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*mdns.EDNS0_EDE); ok {
				out = append(out, e)
			}
		}
	}
	return out
}

// TestExtendedErrors: a query the router refuses carries an Extended DNS Error (RFC 8914)
// naming the refusal, when the client sent EDNS: an address literal, an answer whose
// addresses the host walls refuse a caged guest; a client without EDNS gets the rcode alone,
// and an answer refused for nothing carries none.
func TestExtendedErrors(t *testing.T) {
	zone := map[string][]string{
		"home.example A": {"home.example. 300 IN A 127.0.0.1", "home.example. 300 IN A 192.0.2.10"},
		"ok.example A":   {"ok.example. 300 IN A 192.0.2.11"},
	}
	up := &redirect{t: t, wantNetwork: []string{"tcp"}, wantAddr: resolverAddr, to: startTCP(t, newZone(t, zone))}
	s, err := New(Config{Mode: ModeProxy, Resolver: resolverAddr, Now: newClock().Now},
		Dialers{Proxy: up.dial, Direct: failDial(t, "direct"), Refusals: new(refusal.Book), Walls: fakeWalls{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	guest := Source{Addr: netip.MustParseAddr("10.0.2.15")}
	edns := func(name string) *mdns.Msg {
		q := query(name, mdns.TypeA)
		q.SetEdns0(1232, false)
		return q
	}
	for _, tc := range []struct {
		name  string
		q     *mdns.Msg
		code  uint16
		text  string // in the EDE's text; "" for no EDE
		rcode int
	}{
		{"address literal", edns("192.0.2.1."), mdns.ExtendedErrorCodeBlocked, "refused: dns", mdns.RcodeNameError},
		{"walled answer", edns("home.example."), mdns.ExtendedErrorCodeBlocked, "refused: host-off-limits", mdns.RcodeSuccess},
		{"no EDNS", query("192.0.2.1.", mdns.TypeA), 0, "", mdns.RcodeNameError},
		{"nothing refused", edns("ok.example."), 0, "", mdns.RcodeSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.HandleFrom(context.Background(), guest, tc.q)
			if r.Rcode != tc.rcode {
				t.Errorf("rcode %s; want %s", mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tc.rcode])
			}
			got := edeOf(r)
			if tc.text == "" {
				if len(got) != 0 {
					t.Errorf("EDE %v; want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].InfoCode != tc.code || !strings.Contains(got[0].ExtraText, tc.text) || !strings.HasPrefix(got[0].ExtraText, "router: ") {
				t.Errorf("EDE %v; want code %d with %q", got, tc.code, tc.text)
			}
			if _, err := r.Pack(); err != nil {
				t.Errorf("the answer does not pack: %v", err)
			}
		})
	}
}
