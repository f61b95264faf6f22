package platform

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/internal/ports"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/adapters"
	"github.com/agentcage/router/windivert/redirect"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// windowsPlatform captures with WinDivert through the redirect engine (package redirect)
// and keeps the fail-closed WFP guard (package wfp/guard): the SOCKET layer names the
// process of each new flow, the NETWORK layer reflects the flows the router must carry to
// its transparent listener, DNS is answered by the daemon's DNS server, and the guard
// blocks the caged apps whenever no router runs. redirectPlatform holds the logic; this file
// gives it the system's parts.
type windowsPlatform struct {
	*redirectPlatform
}

// Options are what the Windows capture takes from the process that runs it.
type Options struct {
	// Service is the service's name when the service manager runs this process, "" in the
	// foreground: the guard's permits name it.
	Service string
	// Lock makes this process the only router (cmd/router/service.LockInstance); nil: no
	// lock.
	Lock func() (release func(), err error)
}

// New returns the Windows capture: WinDivert through the redirect engine, and the WFP
// guard. log takes its records (nil: none).
func New(log *slog.Logger, o Options) capture.Platform {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := proc.NewSystemWindowsResolver(log.With("component", "proc"))
	helper := redirect.NewIPHelper(res)
	exe, _ := os.Executable()
	deps := engineDeps{
		LoadDriver: func() (windivert.Driver, func() error, error) {
			if exe == "" {
				return nil, nil, errors.New("windivert: locate router.exe")
			}
			return redirect.LoadWinDivert(filepath.Dir(exe))
		},
		WFP:     wfp.NewEngine(),
		Machine: guard.SystemMachine(),
		Adapters: func() ([]adapters.Adapter, error) {
			as, _, err := adapters.List(adapters.NewSystem())
			return as, err
		},
		WSL: func() (adapters.WSL, error) {
			_, wsl, err := adapters.List(adapters.NewSystem())
			return wsl, err
		},
		Router:       exe,
		Service:      o.Service,
		Lock:         o.Lock,
		Resolver:     res,
		Lookup:       helper.Lookup,
		Connections:  helper.Connections,
		OwnPID:       uint32(os.Getpid()),
		ReservePorts: reservePorts,
		Hold:         startHolder(exe),
		SIDTypeNone:  serviceSIDTypeNone,
	}
	if exe != "" {
		// Beside router.exe: the install directory, which only administrators may write.
		deps.SeenFile = filepath.Join(filepath.Dir(exe), "guarded-apps.txt")
	}
	return windowsPlatform{newRedirectPlatform(log, deps)}
}

// Resolver returns the first DNS server of an adapter that is up (IPv4 first): what the
// host's own resolver asks. The router's queries to it are its own (by PID) and pass.
func (windowsPlatform) Resolver() (string, error) {
	servers, err := adapterDNSServers()
	if err != nil {
		return "", fmt.Errorf("host resolver: %w", err)
	}
	for _, want4 := range []bool{true, false} {
		for _, s := range servers {
			if s.Is4() == want4 && !s.IsLoopback() && !s.IsUnspecified() {
				return netip.AddrPortFrom(s, ports.DNS).String(), nil
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

// Cleanup removes the router's guard (every WFP object of its provider) and returns how
// many filters went.
func Cleanup(table string) (string, error) {
	n, err := guard.New(wfp.NewEngine(), nil).Remove()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("removed the WFP guard (%d filters)", n), nil
}

// OwnControl is nil: the router's own traffic is told by its PID; a helper's connections are
// an ordinary process's.
func OwnControl(uint32) func(network, address string, c syscall.RawConn) error { return nil }
