package router

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
)

// UpstreamConfig is one [proxy.NAME]: how to reach it and how its health is kept.
type UpstreamConfig struct {
	upstream.Config
	Health upstream.HealthConfig
}

// same reports whether two configs make the same upstream (a reload that keeps a proxy as
// it was keeps its health and its remembered addresses).
func (c UpstreamConfig) same(o UpstreamConfig) bool {
	a, b := c.Config, o.Config
	ca, cb := a.RootCAs, b.RootCAs
	a.RootCAs, b.RootCAs = nil, nil
	return a == b && c.Health == o.Health && (ca == cb || ca != nil && cb != nil && ca.Equal(cb))
}

// trackedUp is one proxy in use: its health-tracked upstream and its probe.
type trackedUp struct {
	cfg     UpstreamConfig
	tr      *upstream.Tracked
	stop    context.CancelFunc // the probe's; nil until it runs (Use), or without a probe
	running bool
}

// upstreamOptions are what the upstreams get from the router: its own dialer (marked, never
// captured) and resolver.
func (r *Router) upstreamOptions() upstream.Options {
	return upstream.Options{
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if network == "tcp" {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return nil, fmt.Errorf("dial %s: %w", address, err)
				}
				return r.opts.DialTCP(ctx, ap)
			}
			return r.dialer.DialContext(ctx, network, address)
		},
		Resolve: r.opts.Resolve,
		Log:     r.log.With("component", "upstream"),
	}
}

// prepareUpstreams builds np's upstreams: a proxy whose config is unchanged keeps its
// tracked upstream (health, addresses); a failover list becomes a Group, in the rule's
// order. Nothing starts here (see useUpstreams).
func (r *Router) prepareUpstreams(np *compiled) error {
	r.mu.Lock()
	old := r.tracked
	r.mu.Unlock()
	np.ups = map[string]upstream.Upstream{}
	np.tracked = map[string]*trackedUp{}
	order, err := chainOrder(np.Upstreams)
	if err != nil {
		return err
	}
	for _, c := range order {
		opts := r.upstreamOptions()
		var via *trackedUp
		if c.Via != "" {
			via = np.tracked[c.Via] // built before: chainOrder puts every via first
			opts.Via = via.tr
		}
		// A chained proxy is kept only when its via is kept too (the old one dials the
		// old via).
		if t, ok := old[c.Name]; ok && t.cfg.same(c) && (via == nil || old[c.Via] == via) {
			np.tracked[c.Name] = t
		} else {
			u, err := upstream.New(c.Config, opts)
			if err != nil {
				return err
			}
			tr, err := upstream.Track(u, c.Health, r.log.With("component", "upstream", "proxy", c.Name))
			if err != nil {
				return err
			}
			np.tracked[c.Name] = &trackedUp{cfg: c, tr: tr}
		}
		np.ups[c.Name] = np.tracked[c.Name].tr
	}
	for _, rl := range np.Decision.Rules() {
		if rl.Action != rules.Proxy {
			continue
		}
		if err := np.addGroup(rl.Proxy); err != nil {
			return fmt.Errorf("router: rule %q: %w", rl.Name, err)
		}
	}
	return nil
}

// upstream returns the upstream a rule or DNS names. It only reads: flows call it.
func (np *compiled) upstream(name string) (upstream.Upstream, error) {
	if u, ok := np.ups[name]; ok {
		return u, nil
	}
	return nil, fmt.Errorf("unknown proxy %q", name)
}

// addGroup adds the upstream of a failover list (names joined by ","), at prepare time.
func (np *compiled) addGroup(name string) error {
	if _, ok := np.ups[name]; ok {
		return nil
	}
	var members []*upstream.Tracked
	for _, n := range strings.Split(name, ",") {
		t, ok := np.tracked[n]
		if !ok {
			return fmt.Errorf("unknown proxy %q", n)
		}
		members = append(members, t.tr)
	}
	g, err := upstream.NewGroup(members...)
	if err != nil {
		return err
	}
	np.ups[name] = g
	return nil
}

// useUpstreams starts the probes of np's proxies that do not run yet and stops those of the
// proxies np dropped.
func (r *Router) useUpstreams(np *compiled) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, t := range r.tracked {
		if np.tracked[name] != t && t.stop != nil {
			t.stop()
		}
	}
	for _, t := range np.tracked {
		if !t.running && t.cfg.Health.Every > 0 {
			ctx, cancel := context.WithCancel(context.Background())
			t.stop, t.running = cancel, true
			go t.tr.Run(ctx)
		}
	}
	r.tracked = np.tracked
}

// stopUpstreams stops every probe.
func (r *Router) stopUpstreams() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.tracked {
		if t.stop != nil {
			t.stop()
		}
	}
}

// UpstreamStatus returns the health of every proxy in use, in config order.
func (r *Router) UpstreamStatus() []upstream.Status {
	p := r.pol.Load()
	out := make([]upstream.Status, 0, len(p.Upstreams))
	for _, c := range p.Upstreams {
		if t, ok := p.tracked[c.Name]; ok {
			out = append(out, t.tr.Status())
		}
	}
	return out
}

// DialUpstream connects to address (host:port) through the named upstream (a proxy, or a
// failover list joined by ","); the host is handed to the proxy as a name when it is not an
// IP. The DNS side uses it to reach its resolver.
func (r *Router) DialUpstream(ctx context.Context, proxy, address string) (net.Conn, error) {
	up, err := r.pol.Load().upstream(proxy)
	if err != nil {
		return nil, fmt.Errorf("dial %s via %s: %w", address, proxy, err)
	}
	dst, err := upstream.ParseAddr(address)
	if err != nil {
		return nil, err
	}
	return up.Connect(ctx, dst, nil)
}

// chainOrder returns the upstreams with every proxy after the one it is reached through
// (its via), refusing an unknown via and a cycle (conf refuses both at load; a config built
// in code is checked here).
func chainOrder(ups []UpstreamConfig) ([]UpstreamConfig, error) {
	byName := make(map[string]int, len(ups))
	for i, c := range ups {
		byName[c.Name] = i
	}
	const (
		unseen = iota
		visiting
		done
	)
	state := make([]int, len(ups))
	out := make([]UpstreamConfig, 0, len(ups))
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("router: proxy %q: its chain of vias comes back to it", ups[i].Name)
		}
		state[i] = visiting
		if v := ups[i].Via; v != "" {
			j, ok := byName[v]
			if !ok {
				return fmt.Errorf("router: proxy %q: via %q is no proxy of the config", ups[i].Name, v)
			}
			if err := visit(j); err != nil {
				return err
			}
		}
		state[i] = done
		out = append(out, ups[i])
		return nil
	}
	for i := range ups {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}
