package redirect

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert/packet"
)

// TestProfileSwitch: the engine decides a switched guest's flows (a VM network's guest, a
// caged app known by its image) by the profile Options.Profile picks, at the first packet;
// EndRefused ends the passed flows of the guest that the profile refuses (counted, and the
// app's next packet answered with a RST) and leaves the others' flows alone.
func TestProfileSwitch(t *testing.T) {
	const model = 47831
	vmNet := netip.MustParsePrefix("10.0.2.0/24")
	qemu := rules.Owner{PID: 7, App: "qemu-system-x86_64.exe", AppPath: `C:\Program Files\qemu\qemu-system-x86_64.exe`}
	vbox := rules.Owner{PID: 8, App: "VBoxHeadless.exe", AppPath: `C:\Program Files\Oracle\VirtualBox\VBoxHeadless.exe`}
	all := rules.Rule{Name: "all", Caged: true, Action: rules.Direct}
	only := rules.Rule{Name: "model", Caged: true, Action: rules.Direct, Ports: []rules.PortRange{{Lo: model, Hi: model}}}
	cfg := &conf.Config{Rules: []rules.Rule{all}, Profiles: []conf.Profile{{Name: "offline", Rules: []rules.Rule{only}}},
		Capture: conf.Capture{VMNetworks: []netip.Prefix{vmNet}, CagedApps: []rules.App{rules.MustApp("qemu-system-*.exe"), rules.MustApp("VBoxHeadless.exe")}},
		DNS:     conf.DNS{Mode: conf.DNSFakeIP, Capture: conf.DNSCaptureAll, Pool: netip.MustParsePrefix("198.18.0.0/15")}}
	pol := policy.New(cfg, policy.Env{})
	guestA := netip.MustParseAddrPort("10.0.2.15:40000")
	guestB := netip.MustParseAddrPort("10.0.2.15:40001")
	appB := netip.MustParseAddrPort("192.0.2.10:50124")
	appC := netip.MustParseAddrPort("192.0.2.10:50125")
	modelDst := netip.AddrPortFrom(direct.Addr(), model)
	for _, tc := range []struct {
		name      string
		of        func(p *policy.Policy, f *policy.Flow) bool // the switched guest's flows
		src, src2 netip.AddrPort                              // two of its flows' sources
		other     netip.AddrPort                              // another guest's flow's source
	}{
		{"vm", func(p *policy.Policy, f *policy.Flow) bool { return p.FromVMNetwork(f.Src) }, guestA, guestB, appB},
		{"app", func(p *policy.Policy, f *policy.Flow) bool { return f.App == qemu.App }, appA, appC, appB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var on atomic.Bool
			lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{appA: qemu, appC: qemu, appB: vbox}}
			path := filepath.Join(winetest.TempDir(t), "flows.jsonl")
			audit := auditlog.New(auditlog.Options{})
			if err := audit.Open(path); err != nil {
				t.Fatal(err)
			}
			e, dev, _ := newTest(t, true, pol, Options{Lookup: lk.lookup, Audit: audit, Profile: func(p *policy.Policy, f *policy.Flow) *policy.Policy {
				if on.Load() && tc.of(p, f) {
					sub, _ := p.Profile("offline")
					return sub
				}
				return p
			}})
			passes := func(src, dst netip.AddrPort, flags uint8, seq uint32) {
				t.Helper()
				send(e, tcpPkt(src, dst, flags, seq, 1, ""), outMeta)
				if got := wantOne(t, dev); !got.m.Outbound || got.src != src || got.dst != dst {
					t.Fatalf("%v -> %v: got %v, want the packet passed", src, dst, got)
				}
			}
			refused := func(src, dst netip.AddrPort, flags uint8, seq uint32) {
				t.Helper()
				send(e, tcpPkt(src, dst, flags, seq, 1, ""), outMeta)
				if got := wantOne(t, dev); got.m.Outbound || got.flags&packet.TCPRst == 0 || got.dst != src {
					t.Fatalf("%v -> %v: got %v flags %#x, want a RST to the app", src, dst, got, got.flags)
				}
			}
			passes(tc.src, direct, syn, 100)    // the guest's flow the profile will refuse
			passes(tc.src2, modelDst, syn, 200) // and one it allows
			passes(tc.other, direct, syn, 300)  // another guest's
			before := e.Stats().Refused

			on.Store(true)
			if n := e.EndRefused(tc.of); n != 1 {
				t.Errorf("EndRefused ended %d flows; want 1", n)
			}
			if st := e.Stats(); st.Refused != before+1 {
				t.Errorf("refused %d; want %d", st.Refused, before+1)
			}
			var caged uint64
			for _, r := range e.Refusals() {
				if r.Reason == refusal.Caged {
					caged = r.Count
				}
			}
			if caged != 1 {
				t.Errorf("refusals %+v; want one caged", e.Refusals())
			}
			refused(tc.src, direct, ack, 101)   // the ended flow's next packet
			passes(tc.src2, modelDst, ack, 201) // the allowed one goes on
			passes(tc.other, direct, ack, 301)  // the other guest's too
			refused(tc.src, blocked, syn, 400)  // a new flow: the profile's decision
			passes(tc.src, modelDst, syn, 500)  // the profile allows the model
			if n := e.EndRefused(tc.of); n != 0 {
				t.Errorf("a second EndRefused ended %d flows; want 0", n)
			}
			// The flow log names the profile: the flow ended at the switch, the new one refused.
			if err := audit.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var byProfile []string
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatal(err)
				}
				if m["event"] == "refused" && m["profile"] == "offline" && m["src"] == tc.src.String() {
					byProfile = append(byProfile, m["dst"].(string))
				}
			}
			if len(byProfile) != 2 || byProfile[0] != direct.String() || byProfile[1] != blocked.String() {
				t.Errorf("refusals by profile offline in the flow log: %v; want to %v, then %v\n%s", byProfile, direct, blocked, b)
			}
		})
	}
}

// TestReloadEndsPassedFlows: after a reload (SetPolicy), EndRefused(nil) ends the flows the
// engine passed that the new rules refuse (counted; the app's next packet gets a RST) and
// leaves those they still allow.
func TestReloadEndsPassedFlows(t *testing.T) {
	e, dev, _ := newTest(t, true, testRules(t), Options{})
	other := netip.MustParseAddrPort("198.51.100.21:80")
	for i, dst := range []netip.AddrPort{direct, other} {
		send(e, tcpPkt(appA, dst, syn, uint32(100*i), 0, ""), outMeta)
		if got := wantOne(t, dev); !got.m.Outbound {
			t.Fatalf("%v: got %v, want passed", dst, got)
		}
	}
	h, err := rules.ParseHost(direct.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	blockDirect := rules.Rule{Name: "no-direct", Hosts: []rules.Host{h}, Action: rules.Block}
	e.SetPolicy(testRules(t, blockDirect))
	if n := e.EndRefused(nil); n != 1 {
		t.Errorf("EndRefused ended %d flows; want 1", n)
	}
	if r := e.Refusals(); len(r) != 1 || r[0].Reason != refusal.Rule || r[0].Recent[0].Rule != "no-direct" {
		t.Errorf("refusals %+v; want one by rule no-direct", r)
	}
	send(e, tcpPkt(appA, direct, ack, 1, 1, "x"), outMeta)
	if got := wantOne(t, dev); got.m.Outbound || got.flags&packet.TCPRst == 0 {
		t.Errorf("the ended flow's next packet: %v flags %#x; want a RST to the app", got, got.flags)
	}
	send(e, tcpPkt(appA, other, ack, 101, 1, "x"), outMeta)
	if got := wantOne(t, dev); !got.m.Outbound || got.dst != other {
		t.Errorf("the flow the new rules allow: %v; want passed", got)
	}
}
