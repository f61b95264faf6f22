package daemon

import (
	"errors"
	"fmt"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/router/broker/tlsca"
)

// brokerOf is the broker of cfg's [[credential]] tables (empty without any).
func brokerOf(cfg *conf.Config) *broker.Broker {
	cs := make([]broker.Credential, 0, len(cfg.Credentials))
	for _, c := range cfg.Credentials {
		cs = append(cs, broker.Credential{Name: c.Name, Placeholder: c.Placeholder, Value: c.Value, Forward: c.Forward, Destination: c.Destination, Header: c.Header, Guests: c.Guests,
			TLSTerminate: c.TLSTerminate, Roots: c.Roots})
	}
	return broker.New(cs)
}

// tlsCA is the router's own CA, loaded (made the first time) in the state directory when a
// credential of cfg terminates TLS; nil when none does. A reload that adds one later needs a
// restart: until then its flows fail (router.Options.TLSCA).
func tlsCA(cfg *conf.Config) (*tlsca.CA, error) {
	for _, c := range cfg.Credentials {
		if !c.TLSTerminate {
			continue
		}
		if cfg.Policy.StateDir == "" {
			return nil, errors.New("credential " + c.Name + ": tls_terminate needs the state directory, where the router's CA is kept")
		}
		ca, err := tlsca.LoadOrCreate(cfg.Policy.StateDir)
		if err != nil {
			return nil, fmt.Errorf("credential %s: tls_terminate: %w", c.Name, err)
		}
		return ca, nil
	}
	return nil, nil
}

// dnsCanaries is the running config's broker as the DNS server asks it (dns.Canaries).
type dnsCanaries struct{ d *daemon }

func (c dnsCanaries) Hit(name string) (string, bool) {
	h, hit := c.d.creds.Load().FindName(name, "dns name")
	return h.Credential, hit
}
