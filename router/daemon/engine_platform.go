package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/redirect"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// redirectPlatform is the capture of a host whose packets the redirect engine handles in user
// space (Windows: WinDivert) and whose fail-closed guard is WFP (package wfp/guard). It is
// platform-neutral, its system parts injected (engineDeps), so that its seams are tested on
// Linux with fakes (windiverttest, wfptest); platform_windows.go gives it the real ones.
//
// The order is the guard's contract:
//
//	first Install: lock the instance → Install the guard's plan (persistent blocks) →
//	               open WinDivert → run the engine → reset the caged connections older than
//	               the engine → Arm (dynamic permits for the caged apps and the router)
//	next Install:  the guard's new plan in place (re-armed), then the engine's new policy
//	Close, or the engine failing: Disarm → close WinDivert; a failure is sent on Failed
//
// mu guards every field below it.
type redirectPlatform struct {
	log  *slog.Logger
	deps engineDeps
	host hostAddrs

	portsOnce sync.Once
	ports     OwnPorts // nil: none reserved; set once by ownPorts

	mu      sync.Mutex
	guard   *guard.Guard
	unlock  func()
	eng     *redirect.Engine
	dev     *redirect.WinDivertDevice
	release func() error // the WinDivert DLL
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the engine's Run returned
	ups     []netip.AddrPort
	udp     []windivert.PortRange // the UDP ports the filter takes (nil: all)
	router  *router.Router        // carries the engine's relayed UDP (UseRouter); nil: such UDP is dropped
	closing bool
	failed  chan error // one failure, buffered
}

// engineDeps are the system parts of a redirectPlatform.
type engineDeps struct {
	// LoadDriver loads WinDivert; release unloads it.
	LoadDriver func() (drv windivert.Driver, release func() error, err error)
	// WFP is the filtering engine the guard lives in.
	WFP wfp.Engine
	// Machine finds the caged apps' executables (registry, install directories).
	Machine guard.Machine
	// Adapters lists the VM-facing adapters whose guests the guard walls the host from
	// (nil: none, only the cage subnets).
	Adapters func() ([]adapters.Adapter, error)
	// Router is the absolute path of the router's executable; Service its Windows service
	// name when it runs as one ("" in the foreground).
	Router, Service string
	// Lock makes this process the only router (nil: no lock).
	Lock func() (release func(), err error)
	// Resolver describes PIDs; Lookup finds a socket's owner; Connections lists the TCP
	// connections that exist (local end first). Each may be nil.
	Resolver    redirect.PIDResolver
	Lookup      redirect.LookupFunc
	Connections func() ([]redirect.Conn, error)
	// OwnPID is the router's process.
	OwnPID uint32
	// ReservePorts reserves the source ports of the router's own sockets (nil, or an
	// error: none are; its flows are then told by OwnPID, each packet crossing user mode).
	ReservePorts func() (OwnPorts, error)
}

func newRedirectPlatform(log *slog.Logger, deps engineDeps) *redirectPlatform {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &redirectPlatform{log: log, deps: deps, guard: guard.New(deps.WFP, log.With("component", "guard")), failed: make(chan error, 1)}
}

// Env: this machine's addresses, and the known hypervisors' images, caged whatever the
// config says (the guard blocks them too). Scoped: with local = false the engine leaves
// this host's own uncaged flows alone.
func (p *redirectPlatform) Env() policy.Env {
	return policy.Env{HostAddr: p.host.Has, CagedApps: KnownHypervisorApps("windows"), Scoped: true}
}

// UDPDNSHost is loopback (DNSBinder): the engine answers captured UDP queries in process,
// so the UDP socket serves this host's own tools only; on [::] it would answer the LAN, and
// in proxy mode relay strangers' queries through the user's proxy.
func (p *redirectPlatform) UDPDNSHost() string { return "127.0.0.1" }

// FromVM is nil: VM traffic reaches the engine as a hypervisor process's (an app).
func (p *redirectPlatform) FromVM() func(netip.Addr) bool { return nil }

// Failed delivers the capture's failure while it runs (the engine could not read from
// WinDivert): by then the permits are dropped and WinDivert is closed.
func (p *redirectPlatform) Failed() <-chan error { return p.failed }

// vmAdapters lists this machine's VM-facing adapters for the walls; none when they cannot
// be listed (the cage subnets still are walled), which is logged.
func (p *redirectPlatform) vmAdapters() []adapters.Adapter {
	if p.deps.Adapters == nil {
		return nil
	}
	as, err := p.deps.Adapters()
	if err != nil {
		p.log.Warn("VM-facing adapters not listed: the guard walls the cage subnets only", "err", err)
		return nil
	}
	return as
}

// installGuard puts the config's guard in place (re-armed when armed).
func (p *redirectPlatform) installGuard(cfg *conf.Config) error {
	plan, unresolved, err := GuardPlan(cfg, p.deps.Machine, p.vmAdapters(), p.deps.Router, p.deps.Service)
	if err != nil {
		return fmt.Errorf("guard plan: %w", err)
	}
	if len(unresolved) > 0 {
		p.log.Warn("caged apps the guard cannot name (no such executable): they are caged by the capture while it runs, not blocked while it does not; give their full paths",
			"apps", fmt.Sprint(unresolved))
	}
	if _, err := p.guard.Install(plan); err != nil {
		return err
	}
	return nil
}

func (p *redirectPlatform) Install(cfg *conf.Config, pol *policy.Policy, srv *dns.Server) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return errors.New("capture closed")
	}
	if p.eng != nil {
		if err := p.udpCovered(cfg); err != nil {
			return err
		}
		if err := p.installGuard(cfg); err != nil {
			return err
		}
		p.eng.SetPolicy(pol)
		if ups := literalUpstreams(cfg); !slices.Equal(ups, p.ups) {
			p.log.Info("proxy addresses changed: the capture filter keeps the old ones until restart; the new ones are told by the router's PID",
				"old", fmt.Sprint(p.ups), "new", fmt.Sprint(ups))
		}
		return nil
	}
	if p.deps.Lock != nil && p.unlock == nil {
		unlock, err := p.deps.Lock()
		if err != nil {
			return err
		}
		p.unlock = unlock
	}
	if err := p.installGuard(cfg); err != nil {
		return err
	}
	if err := p.startEngine(cfg, pol, srv); err != nil {
		return err
	}
	if err := p.guard.Arm(); err != nil {
		p.stopEngineLocked()
		return err
	}
	return nil
}

// literalUpstreams are the proxies given by address and dialed directly (no via): the
// filters leave them alone. Proxies given by name are only known once the router resolved
// them; their flows are told by the router's PID instead (each of their packets then
// crosses user mode).
func literalUpstreams(cfg *conf.Config) []netip.AddrPort {
	var out []netip.AddrPort
	for _, px := range cfg.Proxies {
		if px.Via != "" {
			continue // reached through its via: the router never connects to it itself
		}
		if a, err := netip.ParseAddr(px.Host); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), px.Port))
		}
	}
	return out
}

// exclusions are the router's own endpoints the filters leave out: its literal upstreams,
// its reserved source ports, and the forwards' listen addresses (their answers to guests).
// Forwards added by a reload are caught by the filter until the next start: their packets
// then cross user mode and pass as a served connection.
func (p *redirectPlatform) exclusions(cfg *conf.Config, ups []netip.AddrPort) windivert.Exclusions {
	ex := windivert.Exclusions{Upstreams: ups}
	if ports := p.ownPorts(); ports != nil {
		ex.SrcPorts = ports.Ranges()
	}
	for _, f := range cfg.Forwards {
		ex.Servers = append(ex.Servers, f.Listen)
	}
	return ex
}

// startEngine opens WinDivert and runs the engine; it is called with p.mu held.
func (p *redirectPlatform) startEngine(cfg *conf.Config, pol *policy.Policy, srv *dns.Server) error {
	drv, release, err := p.deps.LoadDriver()
	if err != nil {
		return err
	}
	ups := literalUpstreams(cfg)
	wc := redirect.WinDivertConfig{
		ListenerPort: cfg.Capture.ListenerPort,
		DNSPort:      cfg.Capture.DNSPort,
		Exclusions:   p.exclusions(cfg, ups),
	}
	_, unresolved, _ := GuardPlan(cfg, p.deps.Machine, nil, p.deps.Router, p.deps.Service)
	if ports, narrow := udpScope(cfg, unresolved); narrow {
		wc.UDP = []windivert.PortRange{}
		for _, r := range ports {
			wc.UDP = append(wc.UDP, windivert.PortRange{Lo: r.Lo, Hi: r.Hi})
		}
	}
	dev, err := redirect.OpenWinDivert(drv, wc)
	if err != nil {
		release()
		return err
	}
	opts := redirect.Options{
		Log:          p.log.With("component", "redirect"),
		ListenerPort: cfg.Capture.ListenerPort,
		DNSPort:      cfg.Capture.DNSPort,
		Events:       dev,
		Resolver:     p.deps.Resolver,
		Lookup:       p.deps.Lookup,
		OwnPIDs:      []uint32{p.deps.OwnPID},
	}
	// The daemon's DNS server answers captured queries in process and names fake IPs and
	// the addresses of its answers, so host-name rules can decide before the SYN leaves.
	if srv != nil {
		opts.DNS, opts.Names = srv, srv
	}
	var udp *engineUDP
	if p.router != nil {
		udp = &engineUDP{r: p.router}
		opts.UDP = udp
		opts.Audit = p.router.Audit()
	}
	eng, err := redirect.New(dev, pol, opts)
	if err != nil {
		dev.Close()
		release()
		return err
	}
	if udp != nil {
		udp.eng = eng
	}
	p.adoptConnections(eng, pol)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		err := eng.Run(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		p.fail(fmt.Errorf("capture stopped: %w", err))
	}()
	go p.logStats(eng, stopped)
	p.eng, p.dev, p.release, p.cancel, p.stopped, p.ups, p.udp = eng, dev, release, cancel, stopped, ups, wc.UDP
	return nil
}

// udpCovered refuses a reload whose caged UDP the running filter does not take: the
// WinDivert filter is fixed when it opens, so a wider UDP scope needs a restart. It is
// called with p.mu held.
func (p *redirectPlatform) udpCovered(cfg *conf.Config) error {
	if p.udp == nil {
		return nil // every UDP packet is taken
	}
	_, unresolved, _ := GuardPlan(cfg, p.deps.Machine, nil, p.deps.Router, p.deps.Service)
	ports, narrow := udpScope(cfg, unresolved)
	if !narrow {
		return errors.New("the capture takes only the caged apps' UDP to a few ports, and this config needs all of it (local = true, a caged service, a caged app not found, or a direct rule for caged flows without ports): restart the router to apply it")
	}
	for _, r := range ports {
		if !slices.ContainsFunc(p.udp, func(x windivert.PortRange) bool { return x.Lo <= r.Lo && r.Hi <= x.Hi }) {
			return fmt.Errorf("the capture does not take UDP to port %v, which this config lets caged apps reach: restart the router to apply it", r)
		}
	}
	return nil
}

// adoptConnections registers the connections older than the engine whose owner no proxy or
// block rule cages: they go on. A caged app's connections are not registered: their next
// packet is refused with a reset and the app reconnects through the rules (a proxied
// download must not go on direct after a restart).
func (p *redirectPlatform) adoptConnections(eng *redirect.Engine, pol *policy.Policy) {
	if p.deps.Connections == nil {
		return
	}
	conns, err := p.deps.Connections()
	if err != nil {
		p.log.Warn("existing connections not listed; they will be reset", "err", err)
		return
	}
	reset := 0
	for _, c := range conns {
		f := policy.Flow{Src: c.Local.Addr(), Dst: c.Remote.Addr(), Port: c.Remote.Port(), Network: rules.TCP}
		if p.deps.Resolver != nil && c.PID != 0 {
			if info, err := p.deps.Resolver.ByPID(c.PID); err == nil {
				f.App, f.AppPath, f.Services = info.Name, info.Path, info.Services
			}
		}
		if c.PID == p.deps.OwnPID || !pol.Caged(&f) {
			eng.AllowExisting(c.Local, c.Remote)
			continue
		}
		reset++
	}
	if reset > 0 {
		p.log.Info("caged connections older than the capture are reset, so they reconnect through the rules", "connections", reset)
	}
}

func (p *redirectPlatform) logStats(eng *redirect.Engine, stopped <-chan struct{}) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-t.C:
			p.log.Debug("capture stats", "stats", fmt.Sprintf("%+v", eng.Stats()))
		}
	}
}

// fail handles the engine's failure: the permits go first, then WinDivert; the daemon
// learns it on Failed.
func (p *redirectPlatform) fail(err error) {
	p.mu.Lock()
	closing := p.closing
	if !closing {
		if derr := p.guard.Disarm(); derr != nil {
			err = errors.Join(err, derr)
		}
		p.closeDevLocked()
	}
	p.mu.Unlock()
	if closing {
		return
	}
	p.log.Error("capture failed: the guard's permits are dropped (caged apps are blocked) and the router stops", "err", err)
	select {
	case p.failed <- err:
	default:
	}
}

// Close drops the guard's permits, then closes WinDivert: the caged apps are blocked by the
// guard when it returns. The guard's persistent blocks stay.
func (p *redirectPlatform) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closing = true
	err := p.guard.Disarm()
	p.stopEngineLocked()
	if p.unlock != nil {
		p.unlock()
		p.unlock = nil
	}
	return err
}

// stopEngineLocked stops the engine and waits for it; called with p.mu held.
func (p *redirectPlatform) stopEngineLocked() {
	if p.cancel != nil {
		p.cancel()
	}
	stopped := p.stopped
	p.closeDevLocked()
	if stopped != nil {
		p.mu.Unlock()
		<-stopped
		p.mu.Lock()
	}
}

// closeDevLocked closes WinDivert (once) and unloads it; called with p.mu held.
func (p *redirectPlatform) closeDevLocked() {
	if p.dev != nil {
		p.dev.Close()
		p.dev = nil
	}
	if p.release != nil {
		p.release()
		p.release = nil
	}
}

func (p *redirectPlatform) engine() *redirect.Engine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eng
}

var errNotInstalled = errors.New("capture not installed")

// Original: the engine reflected the flow, so the accepted connection's peer is the
// destination; the engine's NAT table knows the app's address.
func (p *redirectPlatform) Original(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	eng := p.engine()
	if eng == nil {
		return netip.AddrPort{}, netip.AddrPort{}, errNotInstalled
	}
	return eng.Original(c)
}

// ownPorts reserves the router's source ports on first use; nil when none could be.
func (p *redirectPlatform) ownPorts() OwnPorts {
	p.portsOnce.Do(func() {
		if p.deps.ReservePorts == nil {
			return
		}
		ports, err := p.deps.ReservePorts()
		if err != nil {
			p.log.Warn("no source ports reserved for the router's own sockets: the capture tells them by the router's PID, and their packets cross user mode", "err", err)
			return
		}
		p.ports = ports
		p.log.Debug("source ports reserved for the router's own sockets", "ranges", fmt.Sprint(ports.Ranges()))
	})
	return p.ports
}

// Control makes the router's outbound sockets take their source ports from the reserved
// ranges, which the capture's filters leave out (nil when none are reserved: the router's
// sockets are then told by its PID). The mark is Linux's.
func (p *redirectPlatform) Control(uint32) func(network, address string, c syscall.RawConn) error {
	ports := p.ownPorts()
	if ports == nil {
		return nil
	}
	var warned sync.Once
	return ownControl(ports, p.host.Has, func(err error) {
		warned.Do(func() { p.log.Warn("a socket of the router got no reserved port", "err", err) })
	})
}

func (p *redirectPlatform) Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (proc.Info, error) {
	return func(c *net.TCPConn, _, dst netip.AddrPort) (proc.Info, error) {
		eng := p.engine()
		if eng == nil {
			return proc.Info{}, errNotInstalled
		}
		return eng.Owner(c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst)
	}
}

// Refusals returns what the engine refused or dropped, by reason, once per flow.
func (p *redirectPlatform) Refusals() []refusal.Stat {
	eng := p.engine()
	if eng == nil {
		return nil
	}
	return eng.Refusals()
}
