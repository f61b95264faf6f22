//go:build !linux && !windows

package checkip

import "net/netip"

// systemGateways: not read on this OS (give --host).
func systemGateways() []Target { return nil }

// systemResolvers: not read on this OS.
func systemResolvers() []netip.Addr { return nil }
