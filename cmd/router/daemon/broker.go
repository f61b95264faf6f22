package daemon

import (
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/broker"
)

// brokerOf is the broker of cfg's [[credential]] tables (empty without any).
func brokerOf(cfg *conf.Config) *broker.Broker {
	cs := make([]broker.Credential, 0, len(cfg.Credentials))
	for _, c := range cfg.Credentials {
		cs = append(cs, broker.Credential{Name: c.Name, Placeholder: c.Placeholder, Value: c.Value, Forward: c.Forward, Destination: c.Destination, Header: c.Header, Guests: c.Guests})
	}
	return broker.New(cs)
}

// dnsCanaries is the running config's broker as the DNS server asks it (dns.Canaries).
type dnsCanaries struct{ d *daemon }

func (c dnsCanaries) Hit(name string) (string, bool) {
	h, hit := c.d.creds.Load().FindName(name, "dns name")
	return h.Credential, hit
}
