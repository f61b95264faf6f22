package dns

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/rules/refusal"
)

// fakeNames refuses blocked.test to every source but 192.0.2.1.
type fakeNames struct{}

func (fakeNames) Refused(src Source, name string) (refusal.Reason, string, string, bool) {
	if name == "blocked.test" && src.Addr != netip.MustParseAddr("192.0.2.1") {
		return refusal.Rule, "telemetry", `refused by the router on the host: rule #2 "telemetry" blocks it`, true
	}
	return 0, "", "", false
}

// TestRefusedNameAnswer: a name the policy refuses to the asking client on every port is
// answered NXDOMAIN with the Extended DNS Error 15 "Blocked" and the reason (when the query
// carried EDNS), is counted, and gets no fake IP; other names and clients are answered as
// before.
func TestRefusedNameAnswer(t *testing.T) {
	book := new(refusal.Book)
	s, err := New(Config{Now: newClock().Now}, Dialers{Refusals: book, Names: fakeNames{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	guest := Source{Addr: netip.MustParseAddr("10.0.2.15")}
	ask := func(src Source, name string, edns bool) *mdns.Msg {
		q := query(name, mdns.TypeA)
		if edns {
			q.SetEdns0(1232, false)
		}
		return s.HandleFrom(context.Background(), src, q)
	}

	m := ask(guest, "blocked.test.", true)
	if m.Rcode != mdns.RcodeNameError || len(m.Answer) != 0 {
		t.Fatalf("blocked name: rcode %s, answer %v; want NXDOMAIN and no answer", mdns.RcodeToString[m.Rcode], m.Answer)
	}
	var ede *mdns.EDNS0_EDE
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*mdns.EDNS0_EDE); ok {
				ede = e
			}
		}
	}
	if ede == nil || ede.InfoCode != mdns.ExtendedErrorCodeBlocked || ede.ExtraText != `refused by the router on the host: rule #2 "telemetry" blocks it` {
		t.Errorf("blocked name: EDE %+v, want 15 (Blocked) with the reason", ede)
	}
	if got := book.Count(refusal.Rule); got != 1 {
		t.Errorf("refusals counted: %d, want 1", got)
	}
	if r := book.Recent(refusal.Rule); len(r) != 1 || r[0].Rule != "telemetry" || r[0].Host != "blocked.test" || r[0].Src.Addr() != guest.Addr {
		t.Errorf("the refusal recorded: %+v, want the guest, the name and the rule", r)
	}
	if m := ask(guest, "blocked.test.", false); m.Rcode != mdns.RcodeNameError || m.IsEdns0() != nil {
		t.Errorf("without EDNS: rcode %s, OPT %v; want NXDOMAIN and no OPT", mdns.RcodeToString[m.Rcode], m.IsEdns0())
	}
	if st := s.pool.stats(); st.Mapped != 0 {
		t.Errorf("the pool maps %d addresses after blocked queries, want 0", st.Mapped)
	}
	for _, tc := range []struct {
		src  Source
		name string
	}{{guest, "allowed.test."}, {Source{Addr: netip.MustParseAddr("192.0.2.1")}, "blocked.test."}} {
		if m := ask(tc.src, tc.name, true); m.Rcode != mdns.RcodeSuccess || len(m.Answer) != 1 {
			t.Errorf("%s from %v: rcode %s, answer %v; want a fake IP", tc.name, tc.src.Addr, mdns.RcodeToString[m.Rcode], m.Answer)
		}
	}
}

// fakeCanaries finds the placeholder "sk-placeholder-0123456789" in any case.
type fakeCanaries struct{}

func (fakeCanaries) Hit(name string) (string, bool) {
	return "openai", strings.Contains(strings.ToLower(name), "sk-placeholder-0123456789")
}

// TestCanaryName: a query whose name carries a brokered credential's placeholder is answered
// NXDOMAIN with the Extended DNS Error 18 (Prohibited), never relayed, and counted, in both
// modes; logged once per guest, credential and domain.
func TestCanaryName(t *testing.T) {
	for _, mode := range []Mode{ModeFakeIP, ModeProxy} {
		t.Run(mode.String(), func(t *testing.T) {
			book := new(refusal.Book)
			logged := &syncbuf.Buffer{}
			d := Dialers{Refusals: book, Canaries: fakeCanaries{}, Proxy: failDial(t, "proxy")}
			s, err := New(Config{Mode: mode, Now: newClock().Now}, d, slog.New(slog.NewTextHandler(logged, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			src := Source{Addr: netip.MustParseAddr("10.0.2.15")}
			for range 3 {
				q := query("SK-PLACEHOLDER-0123456789.exfil.example.", mdns.TypeTXT)
				q.SetEdns0(1232, false)
				m := s.HandleFrom(context.Background(), src, q)
				opt := m.IsEdns0()
				if m.Rcode != mdns.RcodeNameError || opt == nil || len(opt.Option) != 1 {
					t.Fatalf("canary: %s %v; want NXDOMAIN with an EDE", mdns.RcodeToString[m.Rcode], opt)
				}
				if e := opt.Option[0].(*mdns.EDNS0_EDE); e.InfoCode != mdns.ExtendedErrorCodeProhibited {
					t.Errorf("EDE %d, want 18 (Prohibited)", e.InfoCode)
				}
			}
			if n := book.Count(refusal.Canary); n != 3 {
				t.Errorf("canaries counted: %d, want 3", n)
			}
			if n := strings.Count(logged.String(), "canary:"); n != 1 {
				t.Errorf("canary lines logged: %d, want 1:\n%s", n, logged.String())
			}
		})
	}
}
