package adapters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/windows"
	"golang.zx2c4.com/wireguard/windows/tunnel/winipcfg"
)

// wslCreatorID is the Hyper-V firewall's VM creator ID of WSL (Microsoft's documentation
// of Set-NetFirewallHyperVVMSetting).
const wslCreatorID = "{40E0AC32-46A5-438A-A0B2-2B479E8F2E90}"

// psTimeout bounds each PowerShell query: a diagnostic must not hang.
const psTimeout = 15 * time.Second

type winSystem struct{}

// NewSystem returns this machine's System: the IP Helper tables (winipcfg) for the adapters,
// PowerShell's Get-NetNat for WinNAT and Get-NetFirewallHyperVVMSetting for WSL's firewall,
// and %UserProfile%\.wslconfig.
func NewSystem() System { return winSystem{} }

func (winSystem) Interfaces() ([]Interface, error) {
	aas, err := winipcfg.GetAdaptersAddresses(windows.AF_UNSPEC, winipcfg.GAAFlagIncludeAllInterfaces|winipcfg.GAAFlagIncludeGateways)
	if err != nil {
		return nil, fmt.Errorf("get adapters addresses: %w", err)
	}
	fwd := forwarding()
	var out []Interface
	for _, a := range aas {
		i := Interface{Name: a.FriendlyName(), Description: a.Description(), Up: a.OperStatus == winipcfg.IfOperStatusUp, LUID: uint64(a.LUID), Gateway: a.FirstGatewayAddress != nil}
		for u := a.FirstUnicastAddress; u != nil; u = u.Next {
			ip := u.Address.IP()
			if ip == nil {
				continue
			}
			addr, ok := netip.AddrFromSlice(ip)
			if !ok {
				continue
			}
			addr = addr.Unmap()
			if p, err := addr.Prefix(int(u.OnLinkPrefixLength)); err == nil {
				i.Prefixes = append(i.Prefixes, netip.PrefixFrom(addr, p.Bits()))
			}
		}
		if f, ok := fwd[uint64(a.LUID)]; ok {
			i.Forwarding = &f
		}
		out = append(out, i)
	}
	return out, nil
}

// forwarding maps interface LUIDs to whether IP forwarding is on for either family;
// interfaces missing are unknown.
func forwarding() map[uint64]bool {
	out := map[uint64]bool{}
	for _, fam := range []winipcfg.AddressFamily{windows.AF_INET, windows.AF_INET6} {
		rows, err := winipcfg.GetIPInterfaceTable(fam)
		if err != nil {
			continue
		}
		for _, r := range rows {
			out[uint64(r.InterfaceLUID)] = out[uint64(r.InterfaceLUID)] || r.ForwardingEnabled
		}
	}
	return out
}

// powershell runs a command and returns its output lines.
func powershell(command string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), psTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "powershell.exe", "-NoProfile", "-NonInteractive", "-Command", command)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("powershell %q: %w: %s", command, err, strings.TrimSpace(errOut.String()))
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

func (winSystem) NATs() ([]netip.Prefix, error) {
	lines, err := powershell("Get-NetNat | ForEach-Object { $_.InternalIPInterfaceAddressPrefix }")
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, l := range lines {
		if p, err := netip.ParsePrefix(l); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func (winSystem) WSL() (WSL, error) {
	var w WSL
	var errs []error
	if home, err := os.UserHomeDir(); err == nil {
		if f, err := os.Open(filepath.Join(home, ".wslconfig")); err == nil {
			w, err = ParseWSLConfig(f)
			f.Close()
			errs = append(errs, err)
		}
	}
	lines, err := powershell("(Get-NetFirewallHyperVVMSetting -PolicyStore ActiveStore -Name '" + wslCreatorID + "').DefaultOutboundAction")
	if err == nil && len(lines) > 0 {
		w.DefaultOutbound = lines[0]
	}
	errs = append(errs, err)
	if w == (WSL{}) {
		return w, errors.Join(errs...)
	}
	return w, nil
}
