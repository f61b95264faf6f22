// Package modelfwd serves the model forwards' HTTP connections: each request read with
// net/http's parser, judged against the forward's API (rules/modelapi) before any of it
// reaches the model server, its brokered credentials put in place, and proxied to the
// model server over the forwards' own client (serve.go draws the path).
//
// The router accepts the connections (a forward's listen socket, or a caged flow that
// meets a forward's gate), judges who may connect and holds the flow's record; a Server
// takes one connection from there until it ends. The raw forwards (api = "tcp") are the
// router's relay, not this package's.
package modelfwd

import (
	"net/netip"
	"time"

	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/rules/modelapi"
)

// Forward is one [[forward]]: connections to Listen from an Allow source are served to
// Connect (the model server on 127.0.0.1); every other source is refused.
//
// With API set, the forward speaks HTTP (Server.Serve): each request passes only when API
// allows its method and path, and its body only up to MaxBody bytes (0: no bound). With
// API nil, it is a raw TCP pipe that passes everything (`api = "tcp"`).
type Forward struct {
	Name    string
	Listen  netip.AddrPort
	Connect netip.AddrPort
	Allow   []netip.Prefix
	API     *modelapi.Policy
	MaxBody int64
	// Credentials are the brokered credentials: in a request to this forward the values of
	// those bound to it take their placeholders' place (credential.go); nil for none.
	Credentials *broker.Broker
	// IdleTimeout ends a connection idle this long: between two requests of an HTTP
	// forward, both directions quiet for a raw one. 0: the relay's (the router's
	// Settings.IdleTimeout).
	IdleTimeout time.Duration
}

// Allowed reports whether a may connect to the forward's listen address.
func (f Forward) Allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range f.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
