package router

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// The shared flow cases (policytest) through the router: the pieces every case test builds
// its router from.

// casePolicy is the policy of a shared config text (name is its file name, for errors),
// with env as the host's.
func casePolicy(t testing.TB, name, text string, env policy.Env) *policy.Policy {
	t.Helper()
	cfg, err := conf.Parse(name, []byte(text), conf.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return policy.New(cfg, env)
}

// exitSettings are the settings of dec with its one upstream, "exit", a SOCKS5 proxy at
// 127.0.0.1:port.
func exitSettings(dec *policy.Policy, port uint16) Settings {
	return Settings{Decision: dec, Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: port}}}}
}

// caseOptions are the Options of a case's flow fl coming in "through capture": from
// fl.Src port 40000 to dst, owned by fl.App (no process found when it is empty), from the VM
// as fl.FromVM says, with names as the fake-IP names.
func caseOptions(fl policy.Flow, dst netip.AddrPort, names Names) Options {
	return Options{
		Original: func(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			return netip.AddrPortFrom(fl.Src, 40000), dst, nil
		},
		Owner: func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (rules.Owner, error) {
			if fl.App == "" {
				return rules.Owner{}, errors.New("no process")
			}
			return rules.Owner{PID: 7, App: fl.App}, nil
		},
		FromVM: func(netip.Addr) bool { return fl.FromVM },
		Names:  names,
	}
}

// eachInbound runs test as a subtest name/TYPE once on each inbound type.
func eachInbound(t *testing.T, name string, test func(t *testing.T, typ InboundType)) {
	for _, typ := range []InboundType{InboundSOCKS5, InboundHTTP} {
		t.Run(name+"/"+string(typ), func(t *testing.T) { test(t, typ) })
	}
}
