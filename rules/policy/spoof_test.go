package policy_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestSpoofCases: a name the guest wrote picks a rule, never where a direct dial goes. The
// policy asks for the name's addresses before it decides a direct verdict the name won,
// the walls check every one of them, and the dial goes to them (the flow's own address
// first when it is one of them).
func TestSpoofCases(t *testing.T) {
	p := compile(t, policytest.SpoofConfig)
	for _, c := range policytest.SpoofCases() {
		t.Run(c.Name, func(t *testing.T) {
			f := c.Flow
			bare := f
			bare.Resolved = nil
			if want := c.Flow.Resolved != nil; p.NeedsResolve(&bare) != want {
				t.Errorf("NeedsResolve = %v, want %v", !want, want)
			}
			d := p.Decide(&f)
			if d.Step != c.Step || d.Action != c.Action || d.Proxy != c.Proxy || d.Name != c.Rule {
				t.Errorf("got %v %v %q by %q, want %v %v %q by %q", d.Step, d.Action, d.Proxy, d.Name, c.Step, c.Action, c.Proxy, c.Rule)
			}
			if d.ByName != c.ByName || d.Untrusted != c.Untrusted {
				t.Errorf("ByName %v Untrusted %v, want %v %v", d.ByName, d.Untrusted, c.ByName, c.Untrusted)
			}
			if e, _ := p.Explain(&f); e != d {
				t.Errorf("Explain decided %+v, Decide %+v", e, d)
			}
			if c.Action == rules.Direct {
				got := p.DialAddrs(&f, d)
				if len(got) == 0 || got[0] != c.Dial {
					t.Errorf("dials %v, want %v first", got, c.Dial)
				}
				if d.ByName && !slices.Equal(slices.SortedFunc(slices.Values(got), netip.Addr.Compare), slices.SortedFunc(slices.Values(f.Resolved), netip.Addr.Compare)) {
					t.Errorf("dials %v, want the resolved %v", got, f.Resolved)
				}
				if why := p.DialWhy(&f, d); d.Untrusted && !strings.Contains(why, "not trusted") {
					t.Errorf("DialWhy does not say the name is not trusted: %q", why)
				}
			}
			if d.Step != policy.StepRule && p.Why(&f, d) == "" {
				t.Error("no reason")
			}
		})
	}
}

// TestSpoofOracle: on random guest flows (addresses, ports, names in the first bytes, what
// the names resolve to), a direct dial goes to the flow's own address only when the
// address alone gets the same direct rule (the flow decided again without any name, the
// obviously-correct statement), and otherwise only to addresses the name resolves to, each
// of which the walls let through; the flow's address is dialled then only when it is one
// of them.
func TestSpoofOracle(t *testing.T) {
	p := compile(t, policytest.SpoofConfig)
	r := rand.New(rand.NewPCG(34, 1))
	addrs := []string{"203.0.113.66", "198.51.100.20", "198.51.100.200", "127.0.0.1", "192.168.56.1", "10.0.2.2", "10.0.2.3", "169.254.169.254", "198.18.0.5"}
	names := []string{"", "x.corp.test", "localhost", "www.corp.test", "elsewhere.test", "corp.test"}
	ports := []uint16{22, 80, 443, 853, 47831}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	for i := range 20000 {
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), FromVM: r.IntN(2) == 0,
			Dst: netip.MustParseAddr(pick(addrs)), Port: ports[r.IntN(len(ports))], Sniffed: pick(names)}
		if p.InPool(f.Dst) {
			f.Host = "www.corp.test"
		}
		if r.IntN(4) > 0 {
			f.Resolved = []netip.Addr{}
			for range r.IntN(3) {
				f.Resolved = append(f.Resolved, netip.MustParseAddr(pick(addrs)))
			}
		}
		d := p.Decide(&f)
		if d.Action != rules.Direct {
			continue
		}
		bare := f
		bare.Sniffed, bare.Resolved = "", nil
		if bare.Host != "" && !p.InPool(bare.Dst) {
			bare.Host = ""
		}
		b := p.Decide(&bare)
		byAddress := !p.InPool(f.Dst) && b.Action == rules.Direct && b.Index == d.Index
		got := p.DialAddrs(&f, d)
		if byAddress {
			if d.ByName || len(got) != 1 || got[0] != f.Dst {
				t.Fatalf("#%d %+v: the address alone gets %q, yet dials %v (ByName %v)", i, f, b.Name, got, d.ByName)
			}
			continue
		}
		if !d.ByName {
			t.Fatalf("#%d %+v: direct by %q, won by the name, dials the address %v", i, f, d.Name, got)
		}
		if f.Resolved == nil {
			if !p.NeedsResolve(&f) && p.Caged(&f) {
				t.Fatalf("#%d %+v: direct by name without asking what the name resolves to", i, f)
			}
			continue
		}
		for _, a := range got {
			if !slices.Contains(f.Resolved, a) {
				t.Fatalf("#%d %+v: dials %v, not one of the name's addresses %v", i, f, a, f.Resolved)
			}
			if p.Caged(&f) && p.HomeOf(a) != policy.Away {
				g := f
				g.Dst, g.Resolved = a, nil
				if gd := p.Decide(&g); gd.Action == rules.Block {
					t.Fatalf("#%d %+v: dials %v, which the walls refuse (%v)", i, f, a, gd.Step)
				}
			}
		}
	}
}

// BenchmarkDecideSniffedDirect: what the second rules lookup of a direct verdict won by a
// sniffed name costs (sniffed), against the same flow without a name (address).
func BenchmarkDecideSniffedDirect(b *testing.B) {
	cfg, err := conf.Parse("spoof.toml", []byte(policytest.SpoofConfig), conf.Options{SkipSecrets: true})
	if err != nil {
		b.Fatal(err)
	}
	p := policy.New(cfg, policytest.Env())
	f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: policytest.SpoofAddr, Port: 443,
		Sniffed: "x.corp.test", Resolved: []netip.Addr{policytest.CorpAddr}}
	bare := f
	bare.Sniffed, bare.Resolved = "", nil
	for _, c := range []struct {
		name string
		f    *policy.Flow
	}{{"sniffed", &f}, {"address", &bare}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p.Decide(c.f)
			}
		})
	}
}
