package platform

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/router/nftcap"
	"github.com/agentcage/router/router/nftcap/cagemark"
	"github.com/agentcage/router/router/nftcap/nflog"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
)

// The capabilities the Linux capture offers the daemon (see package capture): the daemon
// asks for each with a type assertion, which a changed signature would fail silently.
var (
	_ capture.FDOriginal    = (*linuxPlatform)(nil)
	_ capture.CagedSockets  = (*linuxPlatform)(nil)
	_ capture.UDPSockets    = (*linuxPlatform)(nil)
	_ capture.GuardReporter = (*linuxPlatform)(nil)
	_ capture.KernelCager   = (*linuxPlatform)(nil)
)

// linuxPlatform captures with nftables and attributes local flows through sock_diag.
type linuxPlatform struct {
	log    *slog.Logger
	finder *proc.LinuxFinder
	host   capture.HostAddrs
	guests guestNets
	mu     sync.Mutex // guards the fields below
	table  string     // the table installed last
	base   map[refusal.Reason]uint64
	events refusal.Book // the refused packets NFLOG gave, for their rings only
	log4   *nflog.Reader
	heal   *healer // keeps the table in place while the daemon runs
	// holder owns the hold table from the first install to Close (see nftcap.Holder): no
	// other process can flush it meanwhile. holdMu guards it.
	holdMu sync.Mutex
	holder *nftcap.Holder
	// local is [capture] local of the config installed last (CagedSocket).
	local atomic.Bool
}

// nflogGroup is the NFLOG group the table logs its refusals to (see nftcap.Spec.LogGroup).
// Groups are per network namespace; one router runs in each.
const nflogGroup = 0x5243

// New returns the Linux capture: nftables, sock_diag and the kernel's cage program. log
// takes its records (nil: none).
func New(log *slog.Logger) capture.Platform {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &linuxPlatform{log: log, finder: proc.NewLinuxFinder(proc.LinuxFinderConfig{Logger: log})}
	ops := nftOps()
	ops.install = p.installKeepingCounts
	p.heal = newHealer(log, ops)
	return p
}

// Spec is the nftables capture a config asks for, with the interfaces that face its VM
// networks as they are now (see vmInterfaces).
func Spec(cfg *conf.Config) nftcap.Spec {
	s := nftcap.Spec{
		Table:         cfg.Capture.Table,
		VMNetworks:    cfg.Capture.VMNetworks,
		VMInterfaces:  vmInterfaces(cfg, net.Interfaces),
		Local:         cfg.Capture.Local,
		LocalUDPAllow: cfg.Capture.LocalUDPAllow,
		ListenerPort:  cfg.Capture.ListenerPort,
		DNSPort:       cfg.Capture.DNSPort,
		Mark:          cfg.Capture.Mark,
		LogGroup:      nflogGroup,
		UDPPort:       cfg.Capture.UDPPort,
		UDPMark:       conf.UDPCaptureMark,
		UDPTable:      conf.UDPRouteTable,
	}
	for _, f := range cfg.Forwards {
		s.Forwards = append(s.Forwards, nftcap.Forward{Listen: f.Listen, Allow: f.Allow})
	}
	for _, in := range cfg.Inbounds {
		s.Inbounds = append(s.Inbounds, nftcap.Forward{Listen: in.Listen, Allow: in.Allow})
	}
	if s.CagedApps = CagedNames(cfg); len(s.CagedApps) > 0 {
		s.CagedMark = conf.CagedSocketMark
	}
	return s
}

// Env: the policy learns this machine's addresses and the VM-facing interfaces' subnets
// (guests' networks) from the interface list; nftables takes this host's own flows only
// with local = true (Scoped).
func (p *linuxPlatform) Env() policy.Env {
	return policy.Env{HostAddr: p.host.Has, GuestNet: p.guests.Has, Scoped: true}
}

// Install replaces the nftables table and keeps it in place from then on (see healer); the
// kernel decides what it captures and the router decides the rest, and DNS reaches the
// daemon's DNS server through its redirect, so neither the compiled policy nor the server is
// needed here.
func (p *linuxPlatform) Install(cfg *conf.Config, _ *policy.Policy, _ *dns.Server) error {
	// The healer installs (through installKeepingCounts, which carries the refusal counts
	// over) and keeps the table in place.
	if err := p.heal.install(cfg); err != nil {
		return err
	}
	p.local.Store(cfg.Capture.Local)
	p.mu.Lock()
	p.table = cfg.Capture.Table
	p.listenLog()
	p.mu.Unlock()
	return nil
}

// GuardStatus reports how often the table was restored.
func (p *linuxPlatform) GuardStatus() capture.GuardStatus { return p.heal.status() }

// FromVM: a redirected connection whose source is not an address of this machine was
// forwarded, and only VM networks and VM-facing interfaces are redirected from the
// forwarding path (prerouting); the host's own connections carry its own addresses.
func (p *linuxPlatform) FromVM() func(netip.Addr) bool {
	return func(src netip.Addr) bool { return !p.host.Has(src) }
}

// CagedSocket: the table redirects a flow from this host to one of its own addresses
// (loopback, link-local, a host address) only from a caged process's socket, which the
// kernel marked (nftcap.Spec.CagedApps), and without local = true every flow of this host
// it redirects is one. Such a flow is caged whether or not sock_diag still finds its owner.
// With local = true a flow of this host to another host is caged when its socket carries
// the cage's mark (a child of a caged process, whatever it runs).
func (p *linuxPlatform) CagedSocket() func(src, dst netip.AddrPort) bool {
	return func(src, dst netip.AddrPort) bool {
		return cagedSocket(p.local.Load(), p.host.Has, p.finder.Mark, src, dst)
	}
}

// cagedSocket decides CagedSocket: local is [capture] local, hostHas tells this host's
// addresses, and mark reads the mark of the socket of a flow (proc.LinuxFinder.Mark).
func cagedSocket(local bool, hostHas func(netip.Addr) bool, mark func(proto byte, src, dst netip.AddrPort) (uint32, error), src, dst netip.AddrPort) bool {
	if !hostHas(src.Addr()) && !src.Addr().IsLoopback() {
		return false
	}
	d := dst.Addr().Unmap()
	if !local || policy.IsLocal(d) || hostHas(d) {
		return true
	}
	for _, proto := range []byte{syscall.IPPROTO_TCP, syscall.IPPROTO_UDP} {
		if m, err := mark(proto, src, dst); err == nil {
			return m == conf.CagedSocketMark
		}
	}
	return false
}

// Failed is nil: the kernel's capture cannot fail while the daemon runs (a table that goes
// away is restored by the healer).
func (p *linuxPlatform) Failed() <-chan error { return nil }

// Close stops watching the table and reading the refusal log; the table is the guard and
// stays.
func (p *linuxPlatform) Close() error {
	p.heal.close()
	p.holdMu.Lock()
	if p.holder != nil {
		p.holder.Close() // the hold table stays, owned by nobody
		p.holder = nil
	}
	p.holdMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log4 != nil {
		p.log4.Close()
		p.log4 = nil
	}
	return nil
}

// installKeepingCounts installs s; an install starts the table's refusal counters over, so
// what they counted so far (the boot guard's, the last install's, a damaged table's) is
// added to the base first. Between the read and the install a few refusals may go
// uncounted.
func (p *linuxPlatform) installKeepingCounts(s nftcap.Spec) error {
	h, err := p.hold()
	if err != nil {
		return err
	}
	before, rerr := nftcap.Refusals(s.Table)
	if err := nftcap.Install(s, nftcap.WithHolder(h)); err != nil {
		return err
	}
	if rerr != nil {
		p.log.Debug("refusal counters not read before the install", "err", rerr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.base == nil {
		p.base = map[refusal.Reason]uint64{}
	}
	for r, n := range before {
		p.base[r] += n
	}
	return nil
}

// hold returns the platform's Holder, opened on the first call.
func (p *linuxPlatform) hold() (*nftcap.Holder, error) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	if p.holder == nil {
		h, err := nftcap.NewHolder()
		if err != nil {
			return nil, err
		}
		p.holder = h
	}
	return p.holder, nil
}

// listenLog starts reading the table's refusal log, once; p.mu is held. Without it status
// still counts every refusal, only the latest destinations are missing.
func (p *linuxPlatform) listenLog() {
	if p.log4 != nil {
		return
	}
	r, err := nflog.Listen(nflogGroup, 0)
	if err != nil {
		p.log.Warn("refused destinations will not be listed in status", "err", err)
		return
	}
	p.log4 = r
	go func() {
		for {
			pkts, _, err := r.Read()
			if err != nil {
				return // closed
			}
			for _, pk := range pkts {
				if why, ok := refusal.Parse(pk.Prefix); ok {
					p.events.Note(why, refusal.Event{At: pk.At, Src: pk.Src, Dst: pk.Dst})
				}
			}
		}
	}()
}

// Original: nftables redirects in the kernel, so the peer is the real source.
func (p *linuxPlatform) Original(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	dst, err := nftcap.OriginalDst(c)
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst, err
}

// OriginalFD is Original for a descriptor the router's event loops accepted.
func (p *linuxPlatform) OriginalFD(fd int, peer netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
	dst, err := nftcap.OriginalDstFD(fd, peer)
	return peer, dst, err
}

func (p *linuxPlatform) Control(mark uint32) func(network, address string, c syscall.RawConn) error {
	return nftcap.MarkControl(mark)
}

func (p *linuxPlatform) Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (rules.Owner, error) {
	return func(_ *net.TCPConn, src, dst netip.AddrPort) (rules.Owner, error) {
		return p.finder.LookupTCP(src, dst)
	}
}

// Resolver returns the host's upstream resolver for direct_names. A loopback stub (such as
// systemd-resolved's 127.0.0.53) is skipped: its own upstream queries are captured with
// local = true and would come back to the router. systemd-resolved's list of real upstreams
// is read first.
func (p *linuxPlatform) Resolver() (string, error) {
	for _, path := range []string{"/run/systemd/resolve/resolv.conf", "/etc/resolv.conf"} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		servers, err := dns.ParseResolvConf(f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("host resolver: %s: %w", path, err)
		}
		for _, s := range servers {
			if !s.Addr().IsLoopback() {
				return s.String(), nil
			}
		}
	}
	return "", fmt.Errorf("host resolver: no nameserver other than loopback in /etc/resolv.conf")
}

// Cleanup removes the router's capture table, and with it the guard.
func Cleanup(table string) (string, error) {
	if err := nftcap.Remove(table); err != nil {
		return "", err
	}
	return fmt.Sprintf("removed the capture table inet %s", table), nil
}

// vmInterfaces are the interfaces caged whole: those the config names (and its presets),
// and every interface other than lo that carries an address inside a VM network (the
// host's VM-facing side: its guests are caged with any source address). An interface that
// appears later is caged by name only, or at the next install.
func vmInterfaces(cfg *conf.Config, list func() ([]net.Interface, error)) []string {
	out := slices.Clone(cfg.Capture.VMInterfaces)
	ifs, err := list()
	if err != nil {
		return out
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || slices.Contains(out, ifc.Name) {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			if slices.ContainsFunc(cfg.Capture.VMNetworks, func(n netip.Prefix) bool { return n.Contains(p.Addr().Unmap()) }) {
				out = append(out, ifc.Name)
				break
			}
		}
	}
	return out
}

// OwnControl returns the socket option function that marks a socket as the router's own
// (never captured), for the router's helpers (`router check-proxy`); nil when this process
// may not set marks (not root).
func OwnControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return nftcap.MarkControl(mark)
}

// Refusals returns the guard's nftables counters by reason, since the daemon started (the
// table's counters plus what earlier tables counted), with the latest refused packets the
// log gave.
func (p *linuxPlatform) Refusals() []refusal.Stat {
	p.mu.Lock()
	table := p.table
	counts := maps.Clone(p.base)
	p.mu.Unlock()
	if table == "" {
		return nil
	}
	now, err := nftcap.Refusals(table)
	if err != nil {
		p.log.Debug("refusal counters", "err", err)
	}
	if counts == nil {
		counts = map[refusal.Reason]uint64{}
	}
	for r, n := range now {
		counts[r] += n
	}
	var out []refusal.Stat
	for _, r := range refusal.All() {
		if n := counts[r]; n > 0 {
			out = append(out, refusal.Stat{Reason: r, Count: n, Recent: p.events.Recent(r)})
		}
	}
	return out
}

// Processes lists this host's processes, for the caged processes status shows and the
// uncaged hypervisors it warns of.
func (p *linuxPlatform) Processes() ([]proc.Info, error) { return p.finder.Processes() }

// KernelCaged: the processes the kernel cages, and the uncaged hypervisors (kernelCaged).
func (p *linuxPlatform) KernelCaged() ([]control.KernelCagedStat, []string) {
	return kernelCaged(p, runtime.GOOS)
}

// KernelCage reads the kernel's cage program for this namespace.
func (p *linuxPlatform) KernelCage() (KernelCage, error) {
	names, _, ok, err := cagemark.Installed(0)
	if err != nil {
		return KernelCage{}, err
	}
	once, err := cagemark.Once(0)
	if err != nil {
		return KernelCage{}, err
	}
	ns, _ := proc.NetNSOf("/proc/self")
	return KernelCage{Names: names, Once: once, Installed: ok, NetNS: ns}, nil
}
