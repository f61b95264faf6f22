package policytest

import (
	_ "embed"
	"net/netip"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// SpoofConfig is the config of SpoofCases: the README's setup (the model forwarded from the
// host-only address to loopback, its direct rule naming localhost and the model's port), an
// imported Proxifier profile's `Localhost` rule (a name, no ports), a direct rule by name
// (*.corp.test), a direct rule by address (198.51.100.128/25), and the guest network sent
// through a remote proxy.
//
//go:embed testdata/spoof.toml
var SpoofConfig string

// SpoofAddr is the address the spoofing guest connects to in SpoofCases: no name it
// writes resolves there. CorpAddr is where the router's resolver says the corp names are.
var (
	SpoofAddr = netip.MustParseAddr("203.0.113.66")
	CorpAddr  = netip.MustParseAddr("198.51.100.20")
)

// SpoofCase is a guest's flow under SpoofConfig whose name is one the guest wrote: in its
// first bytes (Flow.Sniffed; From says how a data path's client sends it: "sni" a TLS
// ClientHello, "host" an HTTP/1 request), or asked of an inbound (Flow.Host, no address).
// Flow.Resolved is what the name resolves to through the router's resolver (nil: the
// policy does not ask, NeedsResolve false).
type SpoofCase struct {
	Case
	From string
	// Dial is the address a direct verdict connects to (the flow's own address, or one its
	// name resolves to); invalid for a refusal or a proxy.
	Dial netip.Addr
	// ByName and Untrusted are the Decision's: the direct dial goes to the name as the
	// router resolves it; and that because the name came from the flow's first bytes and
	// won the verdict, while the flow had an address of its own.
	ByName, Untrusted bool
	Paths             Path
}

// Engine is the Windows engine's path (a SpoofCase's Paths): it decides at the SYN,
// before any byte, and must leave a flow whose verdict a name could change to the router.
const Engine Path = 1 << 7

// SpoofCases: a name the guest writes picks a rule but never where a direct dial goes. A
// direct verdict won by a name from the first bytes connects to that name as the router
// resolves it (the address the guest chose only when it is one of them), every resolved
// address checked by the host walls, or is refused; one won by the address alone goes to
// the address; a proxy gets the name as before.
func SpoofCases() []SpoofCase {
	guest := func(dst netip.Addr, port uint16, sniffed string, resolved ...string) policy.Flow {
		f := policy.Flow{Network: rules.TCP, Src: netip.MustParseAddr("10.0.2.15"), Dst: dst, Port: port, Sniffed: sniffed, FromVM: true}
		if resolved != nil {
			f.Resolved = []netip.Addr{}
			for _, a := range resolved {
				f.Resolved = append(f.Resolved, netip.MustParseAddr(a))
			}
		}
		return f
	}
	none := []string{} // looked up, nothing found
	asked := func(name string, port uint16, resolved ...string) policy.Flow {
		f := guest(netip.Addr{}, port, "", resolved...)
		f.Host = name
		return f
	}
	corp, cdn := CorpAddr.String(), netip.MustParseAddr("198.51.100.200")
	hostName := policy.StepHostName
	direct := func(name, from string, f policy.Flow, rule string, dial netip.Addr, byName, untrusted bool, paths Path) SpoofCase {
		return SpoofCase{Case{name, f, policy.StepRule, rules.Direct, "", rule}, from, dial, byName, untrusted, paths}
	}
	refused := func(name, from string, f policy.Flow, s policy.Step, paths Path) SpoofCase {
		return SpoofCase{Case{name, f, s, rules.Block, "", s.String()}, from, netip.Addr{}, true, f.Sniffed != "", paths}
	}
	data := Transparent | Explain | Engine
	return []SpoofCase{
		direct("Host of a corp name to an address it does not resolve to", "host", guest(SpoofAddr, 80, "x.corp.test", corp), "corp", CorpAddr, true, true, data),
		direct("SNI of a corp name to an address it does not resolve to", "sni", guest(SpoofAddr, 443, "x.corp.test", corp), "corp", CorpAddr, true, true, data),
		direct("SNI of a corp name to one of its addresses", "sni", guest(cdn, 443, "www.corp.test", corp, cdn.String()), "corp", cdn, true, true, data),
		refused("SNI of a corp name that resolves to loopback", "sni", guest(SpoofAddr, 443, "loop.corp.test", "127.0.0.1"), hostName, data),
		refused("Host of a corp name that resolves to the host and elsewhere", "host", guest(SpoofAddr, 80, "two.corp.test", corp, "192.168.56.1"), hostName, data),
		refused("Host of a corp name that does not resolve", "host", guest(SpoofAddr, 80, "nx.corp.test", none...), hostName, data),
		refused("README: Host localhost on the model's port, resolving to loopback", "host", guest(SpoofAddr, 47831, "localhost", "127.0.0.1"), hostName, data),
		refused("README: SNI localhost on the model's port, not resolved", "sni", guest(SpoofAddr, 47831, "localhost", none...), hostName, data),
		refused("imported Localhost: SNI localhost to ssh", "sni", guest(SpoofAddr, 22, "localhost", "127.0.0.1"), hostName, data),
		refused("imported Localhost: Host localhost, not resolved", "host", guest(SpoofAddr, 80, "localhost", none...), hostName, data),
		direct("an address a direct rule names, any SNI", "sni", guest(cdn, 443, "whatever.test"), "public-web", cdn, false, false, data),
		{Case{"an unlisted SNI through the proxy", guest(SpoofAddr, 443, "elsewhere.test"), policy.StepRule, rules.Proxy, "exit", "vm"}, "sni", netip.Addr{}, false, false, data},
		{Case{"a corp Host to the host's address", guest(netip.MustParseAddr("192.168.56.1"), 80, "x.corp.test"), policy.StepHost, rules.Block, "", policy.StepHost.String()}, "host", netip.Addr{}, false, false, data},
		direct("an inbound's client asks for a corp name", "", asked("x.corp.test", 80, corp), "corp", CorpAddr, true, false, Inbound),
		// (An inbound takes localhost for the loopback address itself, as the router's DNS answers it.)
		refused("an inbound's client asks for a corp name on the model's port that resolves to loopback", "", asked("model.corp.test", 47831, "127.0.0.1"), hostName, Inbound),
	}
}
