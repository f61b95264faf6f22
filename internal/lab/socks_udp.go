package lab

import (
	"context"
	"fmt"
	"net"
	"strings"

	socks5 "github.com/things-go/go-socks5"
	"github.com/things-go/go-socks5/bufferpool"
)

// GoSocksUDPAddr is a second go-socks5 v0.1.0 that offers UDP ASSOCIATE (the one on
// GoSocksAddr refuses it): its relay listens on InetUplinkAddr at a port of its choosing and
// sends out from ExitAddr, names resolved by the lab DNS. Started by StartGoSocksUDP.
const GoSocksUDPAddr = "198.51.100.1:1082"

// socksUDPBuf is the UDP-capable go-socks5's buffer: a datagram of 65,535 bytes and a
// SOCKS5 header with a name.
const socksUDPBuf = 65535 + 262

// StartGoSocksUDP starts the UDP-capable go-socks5 on GoSocksUDPAddr (the lab stops it) and
// makes the leak counter take the SOCKS traffic of UDP associations as the proxies' own: TCP
// to its port, and UDP from the host to InetUplinkAddr, where only the proxies' UDP relays
// listen (go-socks5 and dante pick the relay's port themselves; nothing else receives UDP
// on that address).
func (l *Lab) StartGoSocksUDP(ctx context.Context) error {
	ln, err := l.inet.Listen(ctx, "tcp", GoSocksUDPAddr)
	if err != nil {
		return err
	}
	srv := socks5.NewServer(
		socks5.WithDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, socksDialTimeout)
			defer cancel()
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if net.ParseIP(host) == nil { // a datagram by name: resolve it as the proxy would
				ip, err := lookupA(ctx, l.inet, host)
				if err != nil {
					return nil, err
				}
				addr = net.JoinHostPort(ip.String(), port)
			}
			return l.inet.DialFrom(ctx, network, ExitAddr, addr)
		}),
		socks5.WithResolver(nsResolver{ns: l.inet}),
		socks5.WithLogger(recordLogger{&l.socksLog}),
		// Its default 32 KiB buffers would cut larger datagrams: room for the largest one
		// and its header, so that what the router is given is what the destination sent.
		socks5.WithBufferPool(bufferpool.NewPool(socksUDPBuf)),
	)
	// go-socks5 opens the relay's socket with net.ListenUDP on the serving goroutine: serve
	// each connection on a thread inside inet, so that the socket is inet's.
	serve := func(c net.Conn) error { return l.inet.Do(func() error { return srv.ServeConn(c) }) }
	cs := startConnServer(ln, serve, &l.socksLog)
	l.addUndo(cs.close)
	_, port, _ := strings.Cut(GoSocksUDPAddr, ":")
	rules := fmt.Sprintf(`add element inet %[1]s proxy_ports { %[2]s }
insert rule inet %[1]s pre iifname "%[3]s" ip saddr %[4]s ip daddr %[5]s meta l4proto udp return
`, LeakTable, port, InetUplinkDev, HostUplinkAddr, InetUplinkAddr)
	if err := l.run(ctx, rules, "ip", "netns", "exec", l.inet.name, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("leak counter: proxies' udp relays: %w", err)
	}
	l.logf("lab %s: go-socks5 with udp associate on %s", l.id, GoSocksUDPAddr)
	return nil
}
