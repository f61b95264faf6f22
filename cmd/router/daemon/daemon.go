// Package daemon wires the router together and runs it: the config, the DNS server, the
// transparent listener, the forwards, the inbounds and the platform's capture. It is what
// `router run` runs; cmd/router only turns signals into a context and a reload channel.
//
// Start order: listeners first (transparent, DNS, forwards, inbounds, the metrics endpoint),
// capture last, so the capture never redirects to a port nobody listens on. Stop: listeners
// close, running flows get a short grace period, and the capture is left in place: it is the
// guard that keeps VM traffic blocked until a router runs again (only `router cleanup`
// removes it). While the daemon runs, the platform keeps the guard whole: on Linux a table
// that something else removes or changes is restored within milliseconds (package
// router/nftcap/platform). The daemon knows the capture only through package capture;
// cmd/router chooses the platform of its operating system.
//
// Reload (a value on Options.Reload, or `router reload` over the control channel, which
// waits for the outcome) applies a new file atomically: it is parsed and
// checked whole, new forward and inbound listeners (and the metrics socket, when [metrics]
// listen changed) are opened and the new capture installed before the new rules take
// effect; any failure leaves the running config untouched, is logged, answered to
// `router reload` and kept for status and the metrics (reloadop.go). Keys that need new
// sockets of the daemon itself ([capture] listener_port, dns_port, udp_port, mark and table),
// the [dns] table and the [control] table need a restart; a reload that changes them is
// refused (restartNeeded, reload.go).
package daemon

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/internal/overbudget"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/router/broker"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/router/upload"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// Options configure Run.
type Options struct {
	ConfigPath string
	Platform   capture.Platform
	// Log receives the daemon's records; its level follows [log] level when Level is set.
	Log   *slog.Logger
	Level *slog.LevelVar
	// Reload asks for the config file to be read again.
	Reload <-chan struct{}
	// Ready, when not nil, is closed once the capture is installed (tests wait on it).
	Ready chan<- struct{}
	// Grace is how long running flows may finish after a stop; default 2 s.
	Grace time.Duration
	// Reloaded, when not nil, receives the outcome of every reload (tests).
	Reloaded chan<- error
	// Load reads and validates the config file; nil: conf.Load with its secrets. Tests feed
	// configs through it that conf would refuse, to check that the daemon holds anyway.
	Load func(path string) (*conf.Config, error)
}

// Run runs the daemon until ctx is done. It returns an error when it cannot start; the
// capture it installed stays in place when it returns.
func Run(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Grace == 0 {
		opts.Grace = 2 * time.Second
	}
	if opts.Load == nil {
		opts.Load = func(path string) (*conf.Config, error) { return conf.Load(path, conf.Options{}) }
	}
	cfg, err := opts.Load(opts.ConfigPath)
	if err != nil {
		return err
	}
	d := &daemon{opts: opts, log: opts.Log, forwards: map[string]*forwardRun{}, reloadNow: make(chan struct{}, 1),
		reloadReq: make(chan reloadRequest), looping: make(chan struct{})}
	defer close(d.looping)
	d.setLevel(cfg)
	if err := d.start(ctx, cfg); err != nil {
		d.stop()
		return err
	}
	d.log.Info("router running", "config", cfg.File, "listener", d.tcp.Addr().String(), "dns", d.cfg.Capture.DNSPort,
		"vm_networks", fmt.Sprint(cfg.Capture.VMNetworks), "local", cfg.Capture.Local, "rules", len(cfg.Rules), "forwards", len(cfg.Forwards), "inbounds", len(cfg.Inbounds))
	if opts.Ready != nil {
		close(opts.Ready)
	}
	for {
		select {
		case <-ctx.Done():
			d.stop()
			d.log.Info("router stopped; the guard stays in place and keeps VM traffic blocked until a router runs again or `router cleanup` removes it")
			return nil
		case err := <-opts.Platform.Failed():
			d.stop()
			return fmt.Errorf("the capture failed, the router stops (the guard stays and keeps VM traffic blocked): %w", err)
		case <-d.reloadNow:
			d.applyReload(ctx, reloadApproval)
		case req := <-d.reloadReq:
			cs, err := d.applyReload(ctx, reloadControl)
			req.reply <- reloadReply{cs, err}
		case <-opts.Reload:
			_, err := d.applyReload(ctx, reloadSignal)
			if opts.Reloaded != nil {
				opts.Reloaded <- err
			}
		}
	}
}

type daemon struct {
	opts Options
	log  *slog.Logger
	mu   sync.Mutex // guards cfg for the control channel; reload is the only writer
	cfg  *conf.Config

	r       *router.Router
	book    refusal.Book  // what the router (and DNS server) refused
	audit   *auditlog.Log // the flow log for audits ([log] flows); its file follows reloads
	dns     *dns.Server
	tcp     *net.TCPListener
	dnsUDP  net.PacketConn
	dnsTCP  net.Listener
	closers []io.Closer // the daemon's own listeners, closed by stop
	serving sync.WaitGroup
	cancel  context.CancelFunc // stops the serving goroutines

	forwards map[string]*forwardRun // by listen address
	inbounds map[string]*inboundRun // by listen address (inbound.go)
	status   *statusHandler         // what the control channel and the metrics show
	desk     *ask.Desk              // the flows held under ask; lives as long as the daemon
	// consoleURL is the web console's URL with its token; "" when off. Set at start.
	consoleURL string
	// reloadNow asks the loop for a reload (an "always" answer was written); buffered 1.
	reloadNow chan struct{}
	metrics   *metricsRun // the [metrics] endpoint, nil when off; start, reload and stop only
	// reloadReq carries the control channel's reloads to the loop (reloadop.go); looping
	// is closed when the loop ends. Both nil for a daemon started without Run.
	reloadReq chan reloadRequest
	looping   chan struct{}
	running   control.ConfigStat // the running config and the reloads; guarded by mu
	// creds is the running config's broker of [[credential]]s; set at start and reload.
	creds atomic.Pointer[broker.Broker]
}

func (d *daemon) setLevel(cfg *conf.Config) {
	if d.opts.Level == nil {
		return
	}
	lv := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	d.opts.Level.Set(lv[cfg.Log.Level])
}

// load is one config and what it compiles to: the decision (once per load, shared by the
// router and the capture) and the router's policy.
type load struct {
	cfg *conf.Config
	dec *policy.Policy
	pol router.Settings
}

// compile turns a config into everything a start or a reload applies.
func (d *daemon) compile(cfg *conf.Config) *load {
	l := &load{cfg: cfg, dec: policy.New(cfg, d.opts.Platform.Env())}
	l.pol = routerPolicy(cfg, l.dec)
	return l
}

// routerPolicy turns a config into the router's policy.
func routerPolicy(cfg *conf.Config, dec *policy.Policy) router.Settings {
	p := router.Settings{
		Decision:       dec,
		IdleTimeout:    cfg.Relay.IdleTimeout,
		ConnectTimeout: cfg.Relay.ConnectTimeout,
		Sockmap:        cfg.Relay.Sockmap,
		AskTimeout:     cfg.Policy.AskTimeout,
	}
	for _, px := range cfg.Proxies {
		p.Upstreams = append(p.Upstreams, UpstreamConfig(px))
	}
	creds := brokerOf(cfg)
	p.Credentials = creds
	for _, f := range cfg.Forwards {
		rf := forwardOf(f) // its gate serves caged flows to the model, with its credentials
		rf.Credentials = creds
		p.Forwards = append(p.Forwards, rf)
	}
	return p
}

// UpstreamConfig is the router's view of one [proxy.NAME] (also what `router check-proxy`
// tests).
func UpstreamConfig(px conf.Proxy) router.UpstreamConfig {
	u := router.UpstreamConfig{Config: upstream.Config{
		Name: px.Name, Type: upstream.Type(px.Type), Host: px.Host, Port: px.Port,
		Username: px.Username, Password: px.Password.Reveal(),
		Pipeline: px.Pipeline, RootCAs: px.RootCAs, Via: px.Via,
	}}
	if px.HealthCheck > 0 {
		// conf checked the target.
		target, _ := upstream.ParseAddr(px.HealthTarget)
		u.Health = upstream.HealthConfig{Every: px.HealthCheck, Target: target}
	}
	return u
}

func forwardOf(f conf.Forward) router.Forward {
	rf := router.Forward{Name: f.Name, Listen: f.Listen, Connect: f.Connect, Allow: f.Allow, MaxBody: f.MaxBody, IdleTimeout: f.IdleTimeout}
	if !f.Raw() {
		// conf took only kinds that compile (tcp alone, never in a list), so New cannot
		// fail here; should it, the forward refuses every call rather than pass them all.
		rf.API, _ = modelapi.New(f.API, f.AllowPaths)
		if rf.API == nil {
			rf.API = &modelapi.Policy{}
		}
	}
	return rf
}

func (d *daemon) start(ctx context.Context, cfg *conf.Config) error {
	pf := d.opts.Platform
	d.creds.Store(brokerOf(cfg))
	d.status = &statusHandler{d: d, started: time.Now()}
	l := d.compile(cfg)
	control := pf.Control(cfg.Capture.Mark)
	d.audit = auditlog.New(auditlog.Options{Log: d.log.With("component", "flowlog")})
	if err := d.audit.Open(cfg.Log.Flows); err != nil {
		return err
	}
	d.desk = d.newDesk() // before the budgets, which ask on it
	ropts := router.Options{
		Audit:    d.audit,
		Log:      d.log.With("component", "router"),
		Original: pf.Original,
		Control:  control,
		Owner:    pf.Owner(),
		OwnerUDP: ownerUDP(pf),
		FromVM:   pf.FromVM(),
		Refusals: &d.book,
		Uploads:  uploadBudget(cfg.Budget, d.budgetAsker(), d.log.With("component", "router")),
	}
	ropts.Asks = d.desk
	if o, ok := pf.(capture.FDOriginal); ok {
		ropts.OriginalFD = o.OriginalFD
	}
	if c, ok := pf.(capture.CagedSockets); ok {
		ropts.CagedSocket = c.CagedSocket()
	}
	// The DNS server dials through the router (d.r, set below before anything is served)
	// and the router asks the DNS server for the names behind addresses.
	if err := d.startDNS(cfg); err != nil {
		return err
	}
	ropts.Names = d.dns
	ca, err := tlsCA(cfg)
	if err != nil {
		return err
	}
	ropts.TLSCA = ca
	r, err := router.New(l.pol, ropts)
	if err != nil {
		return err
	}
	d.r, d.cfg = r, cfg
	d.running = d.loaded(cfg)
	sctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	lc := net.ListenConfig{Control: control}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("::", strconv.Itoa(int(cfg.Capture.ListenerPort))))
	if err != nil {
		return fmt.Errorf("transparent listener: %w", err)
	}
	d.tcp = ln.(*net.TCPListener)
	d.closers = append(d.closers, ln)
	d.serving.Go(func() {
		if err := r.Serve(sctx, d.tcp); err != nil {
			d.log.Error("transparent listener", "err", err)
		}
	})
	if err := d.startUDP(sctx, cfg); err != nil {
		return err
	}
	d.useProfiles()
	if cfg.Capture.DNSPort != 0 {
		port := strconv.Itoa(int(cfg.Capture.DNSPort))
		addr := net.JoinHostPort("::", port)
		udpHost := "::"
		if b, ok := pf.(capture.DNSBinder); ok {
			udpHost = b.UDPDNSHost()
		}
		if d.dnsUDP, err = lc.ListenPacket(ctx, "udp", net.JoinHostPort(udpHost, port)); err != nil {
			return fmt.Errorf("dns listener: %w", err)
		}
		d.closers = append(d.closers, d.dnsUDP)
		if d.dnsTCP, err = lc.Listen(ctx, "tcp", addr); err != nil {
			return fmt.Errorf("dns listener: %w", err)
		}
		d.closers = append(d.closers, d.dnsTCP)
		d.serving.Go(func() {
			if err := d.dns.Serve(sctx, d.dnsUDP, d.dnsTCP); err != nil {
				d.log.Error("dns", "err", err)
			}
		})
	}
	creds := d.creds.Load()
	for _, f := range cfg.Forwards {
		rf := forwardOf(f)
		rf.Credentials = creds
		fr, err := openServed(ctx, rf, d.r.ListenForward)
		if err != nil {
			return err
		}
		d.runForward(fr)
	}
	if err := d.startInbounds(ctx, cfg); err != nil {
		return err
	}
	if cfg.Metrics.Listen.IsValid() {
		m, err := d.openMetrics(ctx, cfg.Metrics.Listen, control)
		if err != nil {
			return err
		}
		d.runMetrics(m)
	}
	if err := d.startControl(cfg, sctx); err != nil {
		return err
	}
	d.startConsole(cfg)
	if err := pf.Install(cfg, l.dec, d.dns); err != nil {
		return fmt.Errorf("install capture: %w", err)
	}
	return nil
}

// startControl opens the channel `router status` and `router explain` use. A daemon that
// cannot open it still runs (the data path matters more); the failure is logged.
func (d *daemon) startControl(cfg *conf.Config, ctx context.Context) error {
	ln, err := control.Listen(cmp.Or(cfg.Control.Socket, control.DefaultPath))
	if err != nil {
		d.log.Warn("no control channel: router status will not reach this daemon", "err", err)
		return nil
	}
	d.serving.Go(func() {
		if err := control.Serve(ctx, ln, d.status, d.log.With("component", "control")); err != nil {
			d.log.Error("control", "err", err)
		}
	})
	return nil
}

// uploadBudget is the router's upload budget of b ([budget] bytes_up_per_domain), asking
// asker past it with over = "ask"; nil without one. Like the DNS server's, it is made at
// start: a change needs a restart.
func uploadBudget(b conf.Budget, asker overbudget.Asker, log *slog.Logger) *upload.Budget {
	return upload.New(upload.Limits{PerDomain: b.BytesUpPerDomain, Window: b.Window, Over: budgetOver(b.Over), Asker: asker}, nil, log)
}

// budgetOver is [budget] over as both budgets take it.
func budgetOver(s string) overbudget.Mode {
	switch s {
	case conf.BudgetAlert:
		return overbudget.Alert
	case conf.BudgetAsk:
		return overbudget.Ask
	}
	return overbudget.Refuse
}

// budgetAsker asks the budgets' questions ([budget] over = "ask") on the daemon's desk, as
// ask rules' flows are: `router ask`, watch and the console list and answer them, and they
// wait [policy] ask_timeout as read at each question (a DNS query, its timeout at most);
// with [policy] unattended nobody is asked and the guest is refused at once.
func (d *daemon) budgetAsker() *ask.Budgets {
	return &ask.Budgets{Desk: d.desk, Timeout: func() time.Duration {
		d.mu.Lock()
		defer d.mu.Unlock()
		switch {
		case d.cfg == nil:
			return conf.DefaultAskTimeout
		case d.cfg.Policy.Unattended:
			return 0
		}
		return cmp.Or(d.cfg.Policy.AskTimeout, conf.DefaultAskTimeout)
	}}
}

func (d *daemon) startDNS(cfg *conf.Config) error {
	mode, err := dns.ParseMode(cfg.DNS.Mode)
	if err != nil {
		return err
	}
	dc := dns.Config{Mode: mode, Pool: cfg.DNS.Pool, TTL: cfg.DNS.TTL, Resolver: cfg.DNS.Resolver, Guests: cfg.Capture.VMNetworks,
		Budget: dns.NameBudget{PerDomain: cfg.Budget.NamesPerDomain, Window: cfg.Budget.Window, Over: budgetOver(cfg.Budget.Over), Asker: d.budgetAsker()}}
	for _, h := range cfg.DNS.DirectNames {
		dc.DirectNames = append(dc.DirectNames, h.String())
	}
	dl := dns.Dialers{Refusals: &d.book, Walls: dnsWalls{d}, Names: dnsNames{d}, Canaries: dnsCanaries{d}, Why: dnsWhy{d}}
	if cfg.DNS.Proxy != "" {
		proxy := cfg.DNS.Proxy
		dl.Proxy = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if network != "tcp" {
				return nil, fmt.Errorf("dns via proxy: %s is not carried", network)
			}
			return d.r.DialUpstream(ctx, proxy, addr)
		}
		if cfg.DNS.Transport == conf.DNSOverUDP {
			dl.ProxyPacket = func(ctx context.Context, addr string) (net.Conn, error) {
				return d.r.DialUpstreamUDP(ctx, proxy, addr)
			}
		}
	}
	if len(dc.DirectNames) > 0 {
		dl.Direct = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.r.Dialer().DialContext(ctx, network, addr)
		}
		if dl.DirectResolver, err = d.opts.Platform.Resolver(); err != nil {
			return fmt.Errorf("dns direct_names: %w", err)
		}
	}
	s, err := dns.New(dc, dl, d.log.With("component", "dns"))
	if err != nil {
		return err
	}
	d.dns = s
	return nil
}

// dnsWalls are the host walls of the router's current policy for the DNS server's answers.
type dnsWalls struct{ d *daemon }

// Caged reports whether src's flows are caged: a source that is not this machine's (it
// came from a VM), or a caged app.
func (w dnsWalls) Caged(src dns.Source) bool {
	p := w.d.r.Decision()
	f := policy.Flow{Src: src.Addr, Owner: src.Owner, FromVM: src.Addr.IsValid() && !p.Local(src.Addr)}
	return p.Caged(&f)
}

func (w dnsWalls) Refused(a netip.Addr) (refusal.Reason, bool) {
	s, refused := w.d.r.Decision().AnswerWall(a)
	return refusal.ForStep(s), refused
}

// dnsNames is the policy as the DNS server asks it about a name (dns.Names): a caged
// source's name that every flow would be refused to is answered as blocked, and why.
type dnsNames struct{ d *daemon }

func (n dnsNames) Refused(src dns.Source, name string) (refusal.Reason, string, string, bool) {
	p := n.d.r.Decision()
	f := policy.Flow{Src: src.Addr, Owner: src.Owner, FromVM: src.Addr.IsValid() && !p.Local(src.Addr), Host: name}
	dec, refused := p.RefusesName(&f)
	if !refused {
		return 0, "", "", false
	}
	why := refusal.ForStep(dec.Step)
	// The flow log records the refusal as it would a refused connection to the name.
	n.d.audit.Add(auditlog.Record{Time: time.Now(), Event: auditlog.EventRefused, Src: netip.AddrPortFrom(src.Addr, 0),
		App: src.App, Caged: true, Name: name, NameFrom: "dns", Rule: dec.Name, Action: dec.Action.String(), Reason: why.String()})
	return why, dec.Name, policy.RefusalText(dec), true
}

// runForward serves fr until stop or a reload that drops it.
func (d *daemon) runForward(fr *forwardRun) {
	d.forwards[fr.cfg.Load().Listen.String()] = fr
	fr.run(d, d.r.ServeForward, "forward", func(f *router.Forward) string { return f.Name })
}

func (d *daemon) stop() {
	// The capture first: on Windows the guard's permits must go before anything else.
	if err := d.opts.Platform.Close(); err != nil {
		d.log.Error("closing the capture", "err", err)
	}
	if d.cancel != nil {
		d.cancel()
	}
	for _, fr := range d.forwards {
		fr.stop()
	}
	d.stopInbounds()
	stopMetrics(d.metrics)
	for _, c := range d.closers {
		c.Close()
	}
	d.serving.Wait()
	if d.r != nil {
		done := make(chan struct{})
		go func() { d.r.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(d.opts.Grace):
			d.log.Info("stopping with flows still open")
		}
		d.r.Close()
	}
	if d.dns != nil {
		d.dns.Close()
	}
	if d.audit != nil {
		if err := d.audit.Close(); err != nil {
			d.log.Error("closing the flow log", "err", err)
		}
	}
}

// metricsAddr is where the metrics are served now; invalid when they are not.
func (d *daemon) metricsAddr() netip.AddrPort {
	if d.metrics == nil {
		return netip.AddrPort{}
	}
	return d.metrics.addr
}
