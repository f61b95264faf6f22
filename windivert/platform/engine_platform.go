package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/redirect"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// The capabilities the Windows capture offers the daemon (see package capture): the daemon
// asks for each with a type assertion, which a changed signature would fail silently.
var (
	_ capture.DNSBinder     = (*redirectPlatform)(nil)
	_ capture.UDPRelay      = (*redirectPlatform)(nil)
	_ capture.GuardReporter = (*redirectPlatform)(nil)
)

// redirectPlatform is the capture of a host whose packets the redirect engine handles in user
// space (Windows: WinDivert) and whose fail-closed guard is WFP (package wfp/guard). It is
// platform-neutral, its system parts injected (engineDeps), so that its seams are tested on
// Linux with fakes (windiverttest, wfptest); platform_windows.go gives it the real ones.
//
// The order is the guard's contract:
//
//	first Install: lock the instance → Install the guard's plan (persistent blocks) →
//	               open WinDivert → hand the diverting handle to the holder → run the
//	               engine → reset the caged connections older than the engine → Arm
//	               (dynamic permits for the caged apps and the router)
//	next Install:  the guard's new plan in place (re-armed), then the engine's new policy
//	Close:         Disarm → wait until Windows enforces none of our permits → close
//	               WinDivert → let the holder go
//	engine failing: (before the engine closes WinDivert, without mu: a reload may hold it)
//	               Seal (disarm for good) → wait as above → close → let the holder go; the
//	               failure is sent on Failed
//	crash:         the kernel closes our handles at once, but the holder's reference keeps
//	               the diverting handle open (its packets are queued, never read, dropped)
//	               until the BFE has run our dynamic session down; then the holder exits
//
// The permits are the only thing that lets a caged app's packet reach the network, and
// they must never be enforced while no diverting handle is open: their teardown in Windows
// is not atomic with ours (docs/windows-guard.md).
//
// mu guards every field below it.
type redirectPlatform struct {
	log  *slog.Logger
	deps engineDeps
	host capture.HostAddrs

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
	router  capture.UDPRouter     // carries the engine's relayed UDP (UseRouter); nil: such UDP is dropped
	// profile picks a switched guest's profile (UseProfiles); nil: every flow by the config's rules
	profile func(p *policy.Policy, f *policy.Flow) *policy.Policy
	closing bool
	failed  chan error   // one failure, buffered
	unhold  func() error // lets the holder go (nil: none)
	cfg     *conf.Config // the config last installed
	pol     *policy.Policy
	rivals  []string // the coexistence check's findings at the last install
	guarded []string // the executables the installed guard blocks
	unnamed []string // caged names the guard found no executable for

	restores    int // the guard found damaged and restored
	lastRestore time.Time
	lastDamage  string

	appsMu      sync.Mutex        // guards the three below (taken after mu, never before)
	extra       map[string]string // lower-cased path → path: caged images seen running from paths the plan missed
	polSnap     *policy.Policy    // p.pol, for noticeApp
	guardedSnap []string          // p.guarded, for noticeApp
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
	// WSL reads WSL2's networking settings (nil, or an error: unknown).
	WSL func() (adapters.WSL, error)
	// SIDTypeNone reports whether the service name's SID type is NONE (nil, or an error:
	// unknown): its processes carry no service SID, so the guard's blocks by service SID
	// never match them while the router is stopped.
	SIDTypeNone func(name string) (bool, error)
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
	// Hold hands the diverting WinDivert handle hv of drv to a holder, another process that
	// keeps it open after this one ends until the permits owner armed are gone (guard.Hold);
	// release lets it go once they are. An error refuses the start: without a holder a
	// crash would let caged packets pass until Windows runs the permits down. nil: no
	// holder (tests of other things).
	Hold func(drv windivert.Driver, hv uintptr, owner uint32) (release func() error, err error)
	// DisarmWait bounds how long stopping waits for Windows to delete the permits before it
	// closes WinDivert anyway (0: 30 s).
	DisarmWait time.Duration
	// SeenFile keeps the caged images seen running from paths the guard's lookup missed,
	// one path a line, so that the next start guards them too ("": not kept).
	SeenFile string
	// WatchEvery is how often the running router checks that its guard is intact and
	// restores it when another tool deleted or changed part of it (0: every 2 s).
	WatchEvery time.Duration
}

func newRedirectPlatform(log *slog.Logger, deps engineDeps) *redirectPlatform {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &redirectPlatform{log: log, deps: deps, guard: guard.NewFor(deps.WFP, log.With("component", "guard"), deps.OwnPID), failed: make(chan error, 1)}
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

// checkUncaged refuses the start while a VM-facing adapter's guests can leave through
// Windows where no capture sees them (adapters.Uncaged, the decision lint warns with),
// unless the config accepts it; accepted ones are logged at each start.
func (p *redirectPlatform) checkUncaged(cfg *conf.Config) error {
	var wsl adapters.WSL
	if p.deps.WSL != nil {
		wsl, _ = p.deps.WSL()
	}
	u := adapters.Uncaged(p.vmAdapters(), cfg.Capture.CageSubnets, wsl)
	if len(u) == 0 {
		return nil
	}
	var names []string
	for _, a := range u {
		names = append(names, fmt.Sprintf("%q (%s)", a.Name, a.Kind))
	}
	if cfg.Capture.UncagedAdapters == "accept" {
		p.log.Warn("adapters whose guests leave uncaged (accepted: [capture] uncaged_adapters = \"accept\")", "adapters", strings.Join(names, ", "))
		return nil
	}
	return fmt.Errorf("adapters whose guests leave through Windows where no capture sees them (kernel NAT or IP forwarding): %s; close them (docs/hyperv.md: an Internal switch in cage_subnets, the Hyper-V firewall's default outbound Block for WSL, forwarding and ICS off), or set [capture] uncaged_adapters = \"accept\" to run with them uncaged", strings.Join(names, ", "))
}

// warnSIDTypeNone warns of each caged service whose SID type is NONE: the guard blocks
// caged services by their service SID, which such a service's processes do not carry, so
// it is caged only while the router runs (the capture sees its host process's services).
func (p *redirectPlatform) warnSIDTypeNone(services []string) {
	if p.deps.SIDTypeNone == nil {
		return
	}
	for _, name := range services {
		if none, err := p.deps.SIDTypeNone(name); err == nil && none {
			p.log.Warn("a caged service's SID type is NONE: the guard cannot block it while the router is stopped; fix (elevated): sc.exe sidtype "+name+" unrestricted, then restart that service", "service", name)
		}
	}
}

// installGuard puts the config's guard in place (re-armed when armed), with the caged
// images seen running from paths the plan missed; it is called with p.mu held. Before it,
// the coexistence check: other products' sublayers above the guard's and their hard permits
// are logged, and refuse the install with [capture] rival_permits = "refuse".
func (p *redirectPlatform) installGuard(cfg *conf.Config) error {
	plan, unresolved, err := GuardPlan(cfg, p.deps.Machine, p.vmAdapters(), p.deps.Router, p.deps.Service)
	if err != nil {
		return fmt.Errorf("guard plan: %w", err)
	}
	extra := p.extraApps(plan.Env.CagedApps)
	ports := p.ownPorts()
	if len(extra) > 0 || ports != nil {
		env := plan.Env
		env.CagedApps = append(slices.Clone(env.CagedApps), extra...)
		if ports != nil {
			for _, r := range ports.Ranges() {
				env.OwnPorts = append(env.OwnPorts, wfp.PortRange{From: r.Lo, To: r.Hi})
			}
		}
		if plan, err = guard.NewPlan(env); err != nil {
			return fmt.Errorf("guard plan: %w", err)
		}
	}
	if err := p.checkRivals(cfg, plan.Env.CagedApps); err != nil {
		return err
	}
	if len(unresolved) > 0 {
		p.log.Warn("caged apps the guard cannot name (no such executable): they are caged by the capture while it runs, and guarded once seen running; give their full paths to guard them while it does not",
			"apps", fmt.Sprint(unresolved))
	}
	p.warnSIDTypeNone(plan.Env.CagedServices)
	rep, err := p.guard.Install(plan)
	if err != nil {
		return err
	}
	p.guarded = slices.DeleteFunc(slices.Clone(plan.Env.CagedApps), func(a string) bool { return slices.Contains(rep.Unresolvable, a) })
	p.unnamed = append(slices.Clone(unresolved), rep.Unresolvable...)
	return nil
}

// checkRivals runs the coexistence check (see installGuard) against the guard's caged
// apps; called with p.mu held.
func (p *redirectPlatform) checkRivals(cfg *conf.Config, caged []string) error {
	rivals, err := guard.Rivals(p.deps.WFP, caged)
	if err != nil {
		p.log.Warn("coexistence check: other products' WFP sublayers not listed", "err", err)
		return nil
	}
	var found, defeating []string
	for _, r := range rivals {
		found = append(found, r.String())
		if len(r.HardPermits) > 0 {
			defeating = append(defeating, r.String())
		}
	}
	if !slices.Equal(found, p.rivals) { // logged when the set changes, not at every check
		for _, r := range rivals {
			if b := r.Breaks(); b != "" {
				p.log.Warn("coexistence: a WFP sublayer above the guard's breaks the router's own flows", "sublayer", r.Sublayer.Name, "weight", r.Sublayer.Weight, "breaks", b)
			}
			if len(r.HardPermits) == 0 {
				p.log.Info("coexistence: a WFP sublayer above the guard's (its blocks add to ours, its soft permits do not override them)", "sublayer", r.Sublayer.Name, "weight", r.Sublayer.Weight)
			} else {
				p.log.Warn("coexistence: a WFP sublayer above the guard's has hard permits that defeat it", "rival", r.String())
			}
		}
	}
	p.rivals = found
	if len(defeating) > 0 && cfg.Capture.RivalPermits == "refuse" {
		return fmt.Errorf("coexistence check: %s; with it the guard does not hold while the router is stopped ([capture] rival_permits = \"refuse\"): turn that product's kill switch or firewall off, or set rival_permits = \"warn\" to accept it",
			strings.Join(defeating, "; "))
	}
	return nil
}

// extraApps returns the images seen running caged from paths not in have (this run's, and
// those SeenFile kept from earlier runs).
func (p *redirectPlatform) extraApps(have []string) []string {
	p.appsMu.Lock()
	defer p.appsMu.Unlock()
	if p.extra == nil {
		p.extra = map[string]string{}
		p.loadSeen()
	}
	var out []string
	for k, path := range p.extra {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, k) }) {
			out = append(out, path)
		}
	}
	slices.Sort(out)
	return out
}

// noticeApp is told every process the engine resolves: a caged one running from a path
// the installed guard does not block gets persistent blocks for that path at once (in the
// background: the engine's lookups do not wait for WFP), so it stays caged when the router
// stops.
func (p *redirectPlatform) noticeApp(info rules.Owner) {
	// Windows' own images (svchost.exe) are never guarded by path (guard.SystemImage):
	// the seen file would put them in the persistent guard.
	if info.AppPath == "" || guard.SystemImage(p.deps.Machine.Getenv("SystemRoot"), info.AppPath) {
		return
	}
	p.appsMu.Lock()
	pol, guarded := p.polSnap, p.guardedSnap
	if pol == nil || p.extra[strings.ToLower(info.AppPath)] != "" ||
		slices.ContainsFunc(guarded, func(g string) bool { return strings.EqualFold(g, info.AppPath) }) {
		p.appsMu.Unlock()
		return
	}
	if !pol.Caged(&policy.Flow{Owner: info}) {
		p.appsMu.Unlock()
		return
	}
	if p.extra == nil {
		p.extra = map[string]string{}
	}
	p.extra[strings.ToLower(info.AppPath)] = info.AppPath
	p.saveSeen(info.AppPath)
	p.appsMu.Unlock()
	p.log.Warn("a caged image runs from a path the guard did not know: guarding it", "app", info.App, "path", info.AppPath)
	go p.guardSeen()
}

// loadSeen adds SeenFile's paths to p.extra; p.appsMu is held.
func (p *redirectPlatform) loadSeen() {
	if p.deps.SeenFile == "" {
		return
	}
	data, err := os.ReadFile(p.deps.SeenFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("the caged images seen earlier are not read", "file", p.deps.SeenFile, "err", err)
		}
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if len(line) >= 3 && line[1] == ':' && (line[2] == '\\' || line[2] == '/') {
			p.extra[strings.ToLower(line)] = line
		}
	}
}

// saveSeen appends path to SeenFile; p.appsMu is held.
func (p *redirectPlatform) saveSeen(path string) {
	if p.deps.SeenFile == "" {
		return
	}
	f, err := os.OpenFile(p.deps.SeenFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.WriteString(path + "\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		p.log.Warn("a caged image seen running is guarded for this run only", "path", path, "file", p.deps.SeenFile, "err", err)
	}
}

// guardSeen reinstalls the guard with the images seen running.
func (p *redirectPlatform) guardSeen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing || p.cfg == nil {
		return
	}
	if err := p.installGuard(p.cfg); err != nil {
		p.log.Error("guarding a caged image seen running failed: it is caged only while the router runs", "err", err)
		return
	}
	p.snapshot()
}

// snapshot publishes the policy and the guarded paths to noticeApp; called with p.mu held.
func (p *redirectPlatform) snapshot() {
	p.appsMu.Lock()
	p.polSnap, p.guardedSnap = p.pol, slices.Clone(p.guarded)
	p.appsMu.Unlock()
}

// GuardStatus reports the guard for `router status`: the rivals found at the last install,
// the executables guarded and the caged names it cannot name.
func (p *redirectPlatform) GuardStatus() capture.GuardStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return capture.GuardStatus{Watched: true, Restores: p.restores, LastRestore: p.lastRestore, LastDamage: p.lastDamage,
		Rivals: slices.Clone(p.rivals), GuardedApps: slices.Clone(p.guarded), Unguarded: slices.Clone(p.unnamed)}
}

// guardingResolver tells the platform every process the engine resolves (noticeApp).
type guardingResolver struct {
	inner redirect.PIDResolver
	p     *redirectPlatform
}

func (r guardingResolver) ByPID(pid uint32) (rules.Owner, error) {
	info, err := r.inner.ByPID(pid)
	if err == nil {
		r.p.noticeApp(info)
	}
	return info, err
}

// guardingAtResolver keeps the inner resolver's PID-reuse check.
type guardingAtResolver struct {
	guardingResolver
	at redirect.PIDAtResolver
}

func (r guardingAtResolver) ByPIDAt(pid uint32, t time.Time) (rules.Owner, error) {
	info, err := r.at.ByPIDAt(pid, t)
	if err == nil {
		r.p.noticeApp(info)
	}
	return info, err
}

func (p *redirectPlatform) resolver() redirect.PIDResolver {
	if p.deps.Resolver == nil {
		return nil
	}
	g := guardingResolver{inner: p.deps.Resolver, p: p}
	if at, ok := p.deps.Resolver.(redirect.PIDAtResolver); ok {
		return guardingAtResolver{g, at}
	}
	return g
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
		// The new rules take effect on the flows the engine passed itself too (the router
		// decides its own again: Router.Use).
		if n := p.eng.EndRefused(nil); n > 0 {
			p.log.Warn("reload ended live flows the capture passed", "flows", n)
		}
		p.cfg, p.pol = cfg, pol
		p.snapshot()
		if ups := literalUpstreams(cfg); !slices.Equal(ups, p.ups) {
			p.log.Info("proxy addresses changed: the capture filter keeps the old ones until restart; the new ones are told by the router's PID",
				"old", fmt.Sprint(p.ups), "new", fmt.Sprint(ups))
		}
		return nil
	}
	if err := p.checkUncaged(cfg); err != nil {
		return err
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
	p.cfg, p.pol = cfg, pol
	p.snapshot()
	if err := p.startEngine(cfg, pol, srv); err != nil {
		return err
	}
	if err := p.guard.Arm(); err != nil {
		p.stopEngineLocked()
		return err
	}
	go p.watchGuard(p.stopped)
	return nil
}

// watchGuard checks the guard every WatchEvery until stopped is closed, and restores it
// (the persistent blocks and, while armed, the permits) when something else removed or
// changed part of it; restores are counted in GuardStatus.
func (p *redirectPlatform) watchGuard(stopped <-chan struct{}) {
	every := p.deps.WatchEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-stopped:
			return
		case <-t.C:
		}
		if tick%15 == 0 { // about every 30 s: a VPN switched on meanwhile shows in status
			p.mu.Lock()
			if !p.closing && p.cfg != nil {
				if err := p.checkRivals(p.cfg, p.guarded); err != nil {
					p.log.Error("coexistence: a rival's hard permits defeat the guard while it runs; it refuses the next start", "err", err)
				}
			}
			p.mu.Unlock()
		}
		damage, err := p.guard.Damage()
		if err != nil || damage == "" {
			continue
		}
		p.mu.Lock()
		if p.closing || p.cfg == nil {
			p.mu.Unlock()
			return
		}
		err = p.installGuard(p.cfg)
		if err == nil {
			p.restores++
			p.lastRestore, p.lastDamage = time.Now(), damage
		}
		p.mu.Unlock()
		if err != nil {
			p.log.Error("the guard was changed by something else and could not be restored", "damage", damage, "err", err)
			continue
		}
		p.log.Warn("the guard was changed by something else: restored", "damage", damage)
	}
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
	if p.deps.Hold != nil {
		// The holder's copy shares the handle's object: closing ours must never shut it
		// down (that would stop the holder's copy diverting too).
		if err := dev.ShareNetwork(); err != nil {
			dev.Close()
			release()
			return fmt.Errorf("start the WinDivert holder: %w", err)
		}
		unhold, err := p.deps.Hold(drv, dev.NetworkHandle(), p.deps.OwnPID)
		if err != nil {
			dev.Close()
			release()
			return fmt.Errorf("start the WinDivert holder: %w", err)
		}
		p.unhold = unhold
	}
	opts := redirect.Options{
		BeforeClose:  p.failClosed,
		Log:          p.log.With("component", "redirect"),
		ListenerPort: cfg.Capture.ListenerPort,
		DNSPort:      cfg.Capture.DNSPort,
		Events:       dev,
		Resolver:     p.resolver(),
		Lookup:       p.deps.Lookup,
		OwnPIDs:      []uint32{p.deps.OwnPID},
		Profile:      p.profile,
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
		p.letGo()
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
				f.Owner = info
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

// failClosed runs in the engine's Run when the device failed, before Run closes it, and
// without p.mu (a reload may hold it; the device stays open meanwhile, so nothing passes
// uncaptured while it waits): the guard is sealed and the permits waited for.
func (p *redirectPlatform) failClosed(error) {
	if err := p.guard.Seal(); err != nil {
		p.log.Warn("capture failed: disarming the guard failed; waiting for Windows to drop the permits", "err", err)
	}
	p.waitNoPermits()
}

// waitNoPermits waits (bounded) until Windows enforces none of this process's permits.
func (p *redirectPlatform) waitNoPermits() {
	wait := p.deps.DisarmWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := guard.WaitNoPermits(ctx, p.deps.WFP, p.deps.OwnPID, 0); err != nil {
		p.log.Error("the guard's permits are still in force: WinDivert closes anyway", "err", err)
	}
}

// letGo releases the holder (once); the permits are gone by then.
func (p *redirectPlatform) letGo() {
	if p.unhold != nil {
		if err := p.unhold(); err != nil {
			p.log.Warn("release the WinDivert holder", "err", err)
		}
		p.unhold = nil
	}
}

// fail handles the engine's failure, reported after Run returned: failClosed dropped the
// permits before WinDivert closed; the holder goes and the daemon learns it on Failed.
func (p *redirectPlatform) fail(err error) {
	p.mu.Lock()
	closing := p.closing
	if !closing {
		if derr := p.guard.Seal(); derr != nil {
			err = errors.Join(err, derr)
		}
		p.closeDevLocked()
		p.letGo()
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
	err := p.guard.Seal()
	p.waitNoPermits()
	p.stopEngineLocked()
	p.letGo()
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

func (p *redirectPlatform) Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (rules.Owner, error) {
	return func(c *net.TCPConn, _, dst netip.AddrPort) (rules.Owner, error) {
		eng := p.engine()
		if eng == nil {
			return rules.Owner{}, errNotInstalled
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
