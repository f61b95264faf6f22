package platform

import (
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules/policy"
)

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
