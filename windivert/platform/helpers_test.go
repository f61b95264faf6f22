package platform

import (
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules/policy"
)

// parse reads a test's config, judged for Linux wherever the test runs (the configs have VM
// networks, which Windows refuses).
func parse(t *testing.T, src string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("t.toml", []byte(src), conf.Options{OS: "linux", LookupEnv: func(string) (string, bool) { return "pw", true }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const base = `
[proxy.exit]
address = "198.51.100.1:1080"
username = "u"
password_env = "P"
pipeline = false
[capture]
vm_networks = ["10.0.2.0/24"]
[[forward]]
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]
[[rule]]
name = "all"
action = "proxy"
`

// routerSettings is the little of the daemon's router settings the UDP test needs: the
// decision and the proxies, without credentials.
func routerSettings(cfg *conf.Config, pol *policy.Policy) router.Settings {
	s := router.Settings{Decision: pol, IdleTimeout: cfg.Relay.IdleTimeout, ConnectTimeout: cfg.Relay.ConnectTimeout}
	for _, px := range cfg.Proxies {
		s.Upstreams = append(s.Upstreams, router.UpstreamConfig{Config: upstream.Config{
			Name: px.Name, Type: upstream.Type(px.Type), Host: px.Host, Port: px.Port, Pipeline: px.Pipeline}})
	}
	return s
}

// udpRouter is the router as the capture sees it, as the daemon hands it over.
type udpRouter struct{ r *router.Router }

func (u udpRouter) HandleUDP(dg capture.Datagram, ret capture.UDPReturn) {
	u.r.HandleUDP(router.Datagram(dg), ret)
}

func (u udpRouter) Audit() *auditlog.Log { return u.r.Audit() }
