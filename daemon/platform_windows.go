package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/dns"
	"github.com/agentcage/router/policy"
	"github.com/agentcage/router/proc"
	"github.com/agentcage/router/redirect"
	"github.com/agentcage/router/windivert"
)

// windowsPlatform captures with WinDivert through the redirect engine (package redirect):
// the SOCKET layer names the process of each new flow, the NETWORK layer reflects the
// flows the router must carry to its transparent listener, and DNS is answered by the
// daemon's DNS server. The router's own traffic is told by its PID (its connect events),
// and its upstreams with literal addresses are left out of the filters, so Control has
// nothing to mark.
//
// Install starts the engine on the first call and swaps its rules on later ones. The
// WinDivert handles live as long as the process: a stopped daemon keeps capturing (and
// answering nothing), the handles close when the process exits. mu guards eng, dev and
// upstreams.
type windowsPlatform struct {
	log  *slog.Logger
	res  *proc.WindowsResolver
	host hostAddrs

	mu        sync.Mutex
	eng       *redirect.Engine
	dev       *redirect.WinDivertDevice
	upstreams []netip.AddrPort
}

// NewPlatform returns the capture of this operating system.
func NewPlatform(log *slog.Logger) Platform {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &windowsPlatform{log: log, res: proc.NewSystemWindowsResolver(log.With("component", "proc"))}
}

// Env: the policy learns this machine's addresses from the interface list.
func (p *windowsPlatform) Env() policy.Env { return policy.Env{HostAddr: p.host.Has} }

// FromVM is nil: VM traffic reaches the engine as a hypervisor process's (an app), never
// from a VM-facing interface.
func (p *windowsPlatform) FromVM() func(netip.Addr) bool { return nil }

// literalUpstreams are the proxies given by address: the filters leave them alone. Proxies
// given by name are only known once the router resolved them; their flows are told by
// the router's PID instead (each of their packets then crosses user mode).
func literalUpstreams(cfg *conf.Config) []netip.AddrPort {
	var out []netip.AddrPort
	for _, px := range cfg.Proxies {
		if a, err := netip.ParseAddr(px.Host); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), px.Port))
		}
	}
	return out
}

func (p *windowsPlatform) Install(cfg *conf.Config, pol *policy.Policy, srv *dns.Server) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eng != nil {
		p.eng.SetPolicy(pol)
		if ups := literalUpstreams(cfg); !slices.Equal(ups, p.upstreams) {
			p.log.Info("proxy addresses changed: the capture filter keeps the old ones until restart; the new ones are told by the router's PID",
				"old", fmt.Sprint(p.upstreams), "new", fmt.Sprint(ups))
		}
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("windivert: locate router.exe: %w", err)
	}
	drv, release, err := redirect.LoadWinDivert(filepath.Dir(exe))
	if err != nil {
		return err
	}
	ups := literalUpstreams(cfg)
	dev, err := redirect.OpenWinDivert(drv, redirect.WinDivertConfig{
		ListenerPort: cfg.Capture.ListenerPort,
		DNSPort:      cfg.Capture.DNSPort,
		Exclusions:   windivert.Exclusions{Upstreams: ups},
	})
	if err != nil {
		release()
		return err
	}
	helper := redirect.NewIPHelper(p.res)
	opts := redirect.Options{
		Log:          p.log.With("component", "redirect"),
		ListenerPort: cfg.Capture.ListenerPort,
		DNSPort:      cfg.Capture.DNSPort,
		Events:       dev,
		Resolver:     p.res,
		Lookup:       helper.Lookup,
		OwnPIDs:      []uint32{uint32(os.Getpid())},
	}
	// The daemon's DNS server answers captured queries in process and names fake IPs and
	// the addresses of its answers, so host-name rules can decide before the SYN leaves.
	opts.DNS, opts.Names = srv, srv
	eng, err := redirect.New(dev, pol, opts)
	if err != nil {
		dev.Close()
		release()
		return err
	}
	// Connections older than the capture keep working; new ones follow the rules.
	if conns, err := helper.Connections(); err != nil {
		p.log.Warn("existing connections not listed; they will be reset", "err", err)
	} else {
		for _, c := range conns {
			eng.AllowExisting(c[0], c[1])
		}
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := eng.Run(context.Background()); err != nil {
			p.log.Error("capture stopped: traffic is no longer redirected", "err", err)
		}
	}()
	go func() { // the engine's counters, for the Windows checklist and support
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
	}()
	p.eng, p.dev, p.upstreams = eng, dev, ups
	return nil
}

func (p *windowsPlatform) engine() *redirect.Engine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eng
}

var errNotInstalled = errors.New("capture not installed")

// Original: the engine reflected the flow, so the accepted connection's peer is the
// destination; the engine's NAT table knows the app's address.
func (p *windowsPlatform) Original(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
	eng := p.engine()
	if eng == nil {
		return netip.AddrPort{}, netip.AddrPort{}, errNotInstalled
	}
	return eng.Original(c)
}

// Control is nil: the router's own sockets are told by its PID, not marked.
func (p *windowsPlatform) Control(uint32) func(network, address string, c syscall.RawConn) error {
	return nil
}

func (p *windowsPlatform) Owner() func(c *net.TCPConn, src, dst netip.AddrPort) (proc.Info, error) {
	return func(c *net.TCPConn, _, dst netip.AddrPort) (proc.Info, error) {
		eng := p.engine()
		if eng == nil {
			return proc.Info{}, errNotInstalled
		}
		return eng.Owner(c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst)
	}
}

// Resolver returns the first DNS server of an adapter that is up (IPv4 first): what the
// host's own resolver asks. The router's queries to it are its own (by PID) and pass.
func (p *windowsPlatform) Resolver() (string, error) {
	servers, err := adapterDNSServers()
	if err != nil {
		return "", fmt.Errorf("host resolver: %w", err)
	}
	for _, want4 := range []bool{true, false} {
		for _, s := range servers {
			if s.Is4() == want4 && !s.IsLoopback() && !s.IsUnspecified() {
				return netip.AddrPortFrom(s, 53).String(), nil
			}
		}
	}
	return "", errors.New("host resolver: no adapter that is up has a DNS server")
}

// adapterDNSServers lists the DNS servers of the adapters that are up
// (GetAdaptersAddresses).
func adapterDNSServers() ([]netip.Addr, error) {
	size := uint32(15 << 10)
	for range 4 {
		buf := make([]byte, size)
		first := (*windows.IpAdapterAddresses)(unsafe.Pointer(&buf[0]))
		err := windows.GetAdaptersAddresses(windows.AF_UNSPEC,
			windows.GAA_FLAG_SKIP_ANYCAST|windows.GAA_FLAG_SKIP_MULTICAST|windows.GAA_FLAG_SKIP_FRIENDLY_NAME, 0, first, &size)
		if errors.Is(err, windows.ERROR_BUFFER_OVERFLOW) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get adapters addresses: %w", err)
		}
		var out []netip.Addr
		for a := first; a != nil; a = a.Next {
			if a.OperStatus != windows.IfOperStatusUp {
				continue
			}
			for d := a.FirstDnsServerAddress; d != nil; d = d.Next {
				if ap, ok := sockaddrAddr(d.Address); ok {
					out = append(out, ap)
				}
			}
		}
		return out, nil
	}
	return nil, errors.New("get adapters addresses: the list keeps growing")
}

func sockaddrAddr(sa windows.SocketAddress) (netip.Addr, bool) {
	ip := sa.IP()
	if ip == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

// Cleanup removes the router's capture: on Windows nothing of it outlives the process yet
// (the persistent WFP guard is a later step).
func Cleanup(table string) error { return nil }
