package daemon

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/nftcap"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/proc"
)

// linuxPlatform captures with nftables and attributes local flows through sock_diag.
type linuxPlatform struct {
	log    *slog.Logger
	finder *proc.LinuxFinder
	host   hostAddrs
}

// NewPlatform returns the capture of this operating system.
func NewPlatform(log *slog.Logger) Platform {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &linuxPlatform{log: log, finder: proc.NewLinuxFinder(proc.LinuxFinderConfig{Logger: log})}
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
		UDPPort:       cfg.Capture.UDPPort,
		UDPMark:       conf.UDPCaptureMark,
		UDPTable:      conf.UDPRouteTable,
	}
	for _, f := range cfg.Forwards {
		s.Forwards = append(s.Forwards, nftcap.Forward{Listen: f.Listen, Allow: f.Allow})
	}
	return s
}

// Env: the policy learns this machine's addresses from the interface list.
func (p *linuxPlatform) Env() policy.Env { return policy.Env{HostAddr: p.host.Has} }

// Install replaces the nftables table; the kernel decides what it captures and the router
// decides the rest, and DNS reaches the daemon's DNS server through its redirect, so neither
// the compiled policy nor the server is needed here.
func (p *linuxPlatform) Install(cfg *conf.Config, _ *policy.Policy, _ *dns.Server) error {
	s := Spec(cfg)
	if err := nftcap.Install(s); err != nil {
		return err
	}
	// The table is in place; a state directory that cannot be written costs the boot unit
	// its fallback, not the running guard.
	if err := saveGuard(cfg.File, s); err != nil {
		p.log.Warn("the last good guard was not saved: a boot whose config cannot be read will not find it", "err", err)
	}
	return nil
}

// FromVM: a redirected connection whose source is not an address of this machine was
// forwarded, and only VM networks and VM-facing interfaces are redirected from the
// forwarding path (prerouting); the host's own connections carry its own addresses.
func (p *linuxPlatform) FromVM() func(netip.Addr) bool {
	return func(src netip.Addr) bool { return !p.host.Has(src) }
}

// Failed is nil: the kernel's capture cannot fail while the daemon runs (a table that goes
// away is the watcher's business).
func (p *linuxPlatform) Failed() <-chan error { return nil }

// Close does nothing: the table is the guard and stays.
func (p *linuxPlatform) Close() error { return nil }

// Original: nftables redirects in the kernel, so the peer is the real source.
func (p *linuxPlatform) Original(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	dst, err := nftcap.OriginalDst(c)
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst, err
}

func (p *linuxPlatform) Control(mark uint32) func(network, address string, c syscall.RawConn) error {
	return nftcap.MarkControl(mark)
}

func (p *linuxPlatform) Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (proc.Info, error) {
	return func(_ *net.TCPConn, src, dst netip.AddrPort) (proc.Info, error) { return p.finder.LookupTCP(src, dst) }
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
