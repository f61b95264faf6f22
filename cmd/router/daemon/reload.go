package daemon

import (
	"context"
	"fmt"
	"os"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
)

// restartNeeded refuses a reload that changes what only a restart applies: the sockets
// of the daemon itself, the [dns] table (but allow_doh and doh_hosts), the [control] and
// [console] tables and [budget].
func restartNeeded(old, cur *conf.Config) error {
	var keys []string
	if old.Capture.ListenerPort != cur.Capture.ListenerPort {
		keys = append(keys, "capture.listener_port")
	}
	if old.Capture.DNSPort != cur.Capture.DNSPort {
		keys = append(keys, "capture.dns_port")
	}
	if old.Capture.UDPPort != cur.Capture.UDPPort {
		keys = append(keys, "capture.udp_port")
	}
	if old.Capture.Mark != cur.Capture.Mark {
		keys = append(keys, "capture.mark")
	}
	if old.Capture.Table != cur.Capture.Table {
		keys = append(keys, "capture.table")
	}
	// allow_doh and doh_hosts are the policy's (policy.DoH), applied by a reload.
	od, cd := old.DNS, cur.DNS
	od.AllowDoH, od.DoHHosts, cd.AllowDoH, cd.DoHHosts = false, nil, false, nil
	if fmt.Sprint(od) != fmt.Sprint(cd) {
		keys = append(keys, "dns")
	}
	if old.Control != cur.Control {
		keys = append(keys, "control")
	}
	if old.Console != cur.Console {
		keys = append(keys, "console")
	}
	if old.Budget != cur.Budget {
		keys = append(keys, "budget") // the DNS server's and the router's upload budget, made at start
	}
	if len(keys) > 0 {
		return fmt.Errorf("%s changed: restart the router to apply that", keys)
	}
	return nil
}

// reload applies the config file anew, all or nothing: the file is parsed and checked, the
// router's policy prepared, forwards on new addresses and the metrics socket on a new
// address opened, and the capture installed; only then do the new rules, forward settings
// and log level take effect, the metrics move (or start, or stop) and the forwards that are
// gone close. Any failure closes what was opened for the new config and leaves the
// running one untouched. A forward whose address stays keeps its socket: a changed allow
// list, target or name is swapped in for the connections accepted after the reload.
func (d *daemon) reload(ctx context.Context) error {
	cfg, err := d.opts.Load(d.opts.ConfigPath)
	if err != nil {
		return err
	}
	if err := restartNeeded(d.cfg, cfg); err != nil {
		return err
	}
	l := d.compile(cfg)
	prepared, err := d.r.Prepare(l.pol)
	if err != nil {
		return err
	}
	want := map[string]router.Forward{}
	var opened []*forwardRun
	var newMetrics *metricsRun // opened for a changed [metrics] listen
	closeOpened := func() {
		for _, o := range opened {
			o.ln.Close()
		}
		stopMetrics(newMetrics)
	}
	creds := brokerOf(cfg)
	for _, f := range cfg.Forwards {
		rf := forwardOf(f)
		rf.Credentials = creds
		want[rf.Listen.String()] = rf
		if _, ok := d.forwards[rf.Listen.String()]; ok {
			continue // kept; its settings are swapped below
		}
		fr, err := openServed(ctx, rf, d.r.ListenForward)
		if err != nil {
			closeOpened()
			return err
		}
		opened = append(opened, fr)
	}
	inb, err := d.prepareInbounds(ctx, cfg)
	if err != nil {
		closeOpened()
		return err
	}
	metricsMoved := cfg.Metrics.Listen != d.metricsAddr()
	if metricsMoved && cfg.Metrics.Listen.IsValid() {
		if newMetrics, err = d.openMetrics(ctx, cfg.Metrics.Listen, d.opts.Platform.Control(cfg.Capture.Mark)); err != nil {
			closeOpened()
			inb.abort()
			return err
		}
	}
	if cfg.Log.Flows != "" && cfg.Log.Flows != d.cfg.Log.Flows {
		// The new flow log must open before anything is swapped.
		f, err := os.OpenFile(cfg.Log.Flows, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			closeOpened()
			inb.abort()
			return fmt.Errorf("open flow log: %w", err)
		}
		f.Close()
	}
	if err := d.opts.Platform.Install(cfg, l.dec, d.dns); err != nil {
		closeOpened()
		inb.abort()
		return fmt.Errorf("install capture: %w", err)
	}
	// Nothing below can fail (but the flow log's file, which opened above: logged).
	d.r.Use(prepared)
	if err := d.audit.Open(cfg.Log.Flows); err != nil {
		d.log.Error("flow log", "err", err)
	}
	for addr, fr := range d.forwards {
		nf, keep := want[addr]
		if keep {
			fr.cfg.Store(&nf)
			continue
		}
		fr.stop()
		delete(d.forwards, addr)
	}
	for _, fr := range opened {
		d.runForward(fr)
	}
	d.commitInbounds(inb)
	if metricsMoved {
		stopMetrics(d.metrics)
		d.metrics = nil
		if newMetrics != nil {
			d.runMetrics(newMetrics)
		}
	}
	d.mu.Lock()
	d.cfg = cfg
	d.mu.Unlock()
	d.creds.Store(brokerOf(cfg))
	d.setLevel(cfg)
	return nil
}
