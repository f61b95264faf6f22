package policytest

import (
	_ "embed"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// ModelPort is GateConfig's model server port (its forward "model" connects to
// 127.0.0.1:ModelPort); tests that run a model server replace it with their server's.
const ModelPort = 11434

// GateConfig is the config of GateCases, the model gate (policy.Policy.Gate): the
// model on this host's loopback, forwarded to a guest network from the host's VM-facing
// address (10.0.2.2) on another port; a raw forward (api = "tcp"); the user-space NATs
// (slirp4netns, pasta, a QEMU on -netdev user) caged by app, with a direct rule naming the
// model's port on loopback for them (the recipe's rule), one naming it on the VM-facing
// address for the guest network (a server listening on every address), one for a web
// server there; the rest through the proxy.
//
//go:embed testdata/gate.toml
var GateConfig string

// GateCase is a flow, the decision every path reaches under GateConfig, and the gate it
// meets ("": none).
type GateCase struct {
	Name   string
	Flow   policy.Flow
	Action rules.Action
	Rule   string // the deciding rule's name, or the step's name
	Gate   string // the forward whose gate serves the flow; "" for none
	Raw    bool   // that forward is a raw pipe
	Paths  Path
}

// GateCases are the model gate's shared cases (GateConfig, WallEnv's host addresses).
func GateCases() []GateCase {
	tcp := rules.TCP
	usernat := func(dst string) policy.Flow { return flow(tcp, "slirp4netns", "127.0.0.1", dst) }
	vm := func(dst string) policy.Flow {
		f := flow(tcp, "", "10.0.2.15", dst)
		f.FromVM = true
		return f
	}
	named := func(f policy.Flow, name string, resolved ...string) policy.Flow {
		f.Host, f.Resolved = name, []netip.Addr{}
		for _, a := range resolved {
			f.Resolved = append(f.Resolved, netip.MustParseAddr(a))
		}
		return f
	}
	host := policy.StepHost.String()
	all := Transparent | Inbound | Explain
	return []GateCase{
		{"usernat, the forward's connect address", usernat("127.0.0.1:11434"), rules.Direct, host, "model", false, Transparent | Explain},
		{"usernat, ::1 at the model port", usernat("[::1]:11434"), rules.Direct, "model-loopback", "model", false, Transparent | Explain},
		{"usernat, the VM-facing address at the model port", usernat("10.0.2.2:11434"), rules.Direct, "model-gateway", "model", false, Transparent | Explain},
		{"usernat, the forward's listen address", usernat("10.0.2.2:11435"), rules.Direct, host, "", false, Transparent | Explain},
		{"usernat, the raw forward's connect address", usernat("127.0.0.1:9000"), rules.Direct, host, "raw", true, Transparent | Explain},
		{"usernat, the uplink at the model port", usernat("198.51.100.2:11434"), rules.Block, host, "", false, Transparent | Explain},
		{"usernat, a web server on the gateway", usernat("10.0.2.2:8080"), rules.Direct, "gateway-web", "", false, Transparent | Explain},
		{"usernat, public", usernat("203.0.113.10:443"), rules.Proxy, "usernat", "", false, Transparent | Explain},
		// A name a direct rule lets through, which resolves to the model's loopback: its fake
		// IP is not the model's address, what it resolves to is.
		{"usernat, a name resolving to the model's loopback", named(usernat(PoolAddr.String()+":11434"), "model.corp.test", "127.0.0.1"), rules.Direct, "corp", "model", false, Transparent},
		{"vm, the gateway at the model port", vm("10.0.2.2:11434"), rules.Direct, "model-gateway", "model", false, all},
		{"vm, the forward's listen address", vm("10.0.2.2:11435"), rules.Direct, host, "", false, all},
		{"vm, loopback at the model port", vm("127.0.0.1:11434"), rules.Block, host, "", false, all},
		{"vm, a web server on the gateway", vm("10.0.2.2:8080"), rules.Direct, "gateway-web", "", false, all},
		{"host app, loopback at the model port", flow(tcp, Chrome, "127.0.0.1", "127.0.0.1:11434"), rules.Direct, policy.StepLocal.String(), "", false, Explain},
	}
}

// GateAddr is the gate case's destination with its model port replaced by port (a test's
// model server), as its config is with GateConfigAt.
func GateAddr(f policy.Flow, port uint16) netip.AddrPort {
	p := f.Port
	if p == ModelPort {
		p = port
	}
	return netip.AddrPortFrom(f.Dst, p)
}

// GateConfigAt is GateConfig with the model port replaced by port.
func GateConfigAt(port uint16) string {
	return strings.ReplaceAll(GateConfig, strconv.Itoa(ModelPort), strconv.Itoa(int(port)))
}
