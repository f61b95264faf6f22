package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/agentcage/router/cmd/router/metrics"
)

// metricsRun is the Prometheus endpoint of [metrics] listen: its socket and its server.
// The daemon holds at most one; a reload that changes the address opens the new socket
// before it commits and closes the old one after.
type metricsRun struct {
	addr   netip.AddrPort
	ln     net.Listener
	cancel context.CancelFunc // set by runMetrics; stops the server and closes ln
}

// openMetrics opens the metrics socket on addr with the router's own socket options (its
// replies are the router's traffic, never captured). It does not serve yet.
func (d *daemon) openMetrics(ctx context.Context, addr netip.AddrPort, control func(string, string, syscall.RawConn) error) (*metricsRun, error) {
	lc := net.ListenConfig{Control: control}
	ln, err := lc.Listen(ctx, "tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	return &metricsRun{addr: addr, ln: ln}, nil
}

// runMetrics serves m until stopMetrics or the daemon's stop. Every scrape takes one
// status snapshot, the one `router status` shows.
func (d *daemon) runMetrics(m *metricsRun) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	d.metrics = m
	log := d.log.With("component", "metrics")
	h := metrics.Handler(metrics.NewRegistry(d.status.Status), log)
	d.serving.Go(func() {
		if err := metrics.Serve(ctx, m.ln, h, log); err != nil {
			log.Error("metrics", "err", err)
		}
	})
	log.Info("serving metrics", "listen", m.addr.String(), "path", metrics.Path)
}

// stopMetrics stops m's server (closing its socket) when it serves, or closes the socket
// it opened; nil does nothing.
func stopMetrics(m *metricsRun) {
	switch {
	case m == nil:
	case m.cancel != nil:
		m.cancel()
	default:
		m.ln.Close()
	}
}
