package platform

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/nftcap"
	"github.com/agentcage/router/rules"
)

// ListenUDP opens the transparent UDP sockets on [capture] udp_port (IPv4, and IPv6 unless
// the host has none) and the reply sockets' return path, all marked as the router's own.
func (p *linuxPlatform) ListenUDP(cfg *conf.Config) ([]capture.UDPReader, capture.UDPReturn, []io.Closer, error) {
	mark := cfg.Capture.Mark
	var readers []capture.UDPReader
	var closers []io.Closer
	for _, network := range []string{"udp4", "udp6"} {
		u, err := nftcap.ListenUDP(network, cfg.Capture.UDPPort, mark)
		if err != nil {
			if network == "udp6" && errors.Is(err, syscall.EAFNOSUPPORT) {
				p.log.Info("no IPv6 on this host: UDP is captured for IPv4 only")
				continue
			}
			return nil, nil, closers, fmt.Errorf("udp listener: %w", err)
		}
		readers = append(readers, u)
		closers = append(closers, u)
	}
	ret := router.NewSocketReturn(func(from netip.AddrPort) (*net.UDPConn, error) {
		return nftcap.ListenReply(from, mark)
	})
	return readers, ret, append(closers, ret), nil
}

// OwnerUDP: sock_diag and /proc, like TCP.
func (p *linuxPlatform) OwnerUDP() func(src, dst netip.AddrPort) (rules.Owner, error) {
	return p.finder.LookupUDP
}
