package lab

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/miekg/dns"
	socks5 "github.com/things-go/go-socks5"
	"github.com/things-go/go-socks5/statute"
)

// A SOCKS5 upstream on the host itself, as an `ssh -D`, tor or sing-box on 127.0.0.1 is:
// it resolves names (through the lab DNS) and connects from the host, so a name that
// resolves to 127.0.0.1 reaches the host's loopback. LoopName is such a name.
const (
	// HostSocksAddr is go-socks5 in the host namespace (StartHostSocks); it dials from the
	// host's own addresses, unmarked: run the router with local = false beside it.
	HostSocksAddr = "127.0.0.1:1082"
	// LoopName resolves to 127.0.0.1 (A) and ::1 (AAAA) in the lab DNS.
	LoopName = "loop.lab.test"
)

// Names under HomeZone lead home, as a name a guest's agent looks up might (a DNS
// rebinding, or a `direct` rule's *.corp name pointing at the host): the lab DNS answers
// each with one address of the host or of another guest, A or AAAA as the address is.
const HomeZone = "home.lab.test"

// HomeNames are the names under HomeZone and where they lead.
var HomeNames = map[string]string{
	"loop." + HomeZone:   "127.0.0.1",
	"zero." + HomeZone:   "0.0.0.0",
	"six." + HomeZone:    "::1",
	"meta." + HomeZone:   MetadataAddr,
	"uplink." + HomeZone: HostUplinkAddr,
	"guest2." + HomeZone: SecondGuestAddr,
}

// MetadataAddr is a link-local address the tests may put on the host's loopback, as a cloud
// host's metadata service is reached.
const MetadataAddr = "169.254.169.254"

// loopAnswer is the lab DNS's answer for LoopName and HomeNames (nil for any other question).
func loopAnswer(q dns.Question) dns.RR {
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: zoneTTL}
	if a, ok := HomeNames[strings.TrimSuffix(strings.ToLower(q.Name), ".")]; ok {
		ip := net.ParseIP(a)
		switch {
		case q.Qtype == dns.TypeA && ip.To4() != nil:
			return &dns.A{Hdr: hdr, A: ip.To4()}
		case q.Qtype == dns.TypeAAAA && ip.To4() == nil:
			return &dns.AAAA{Hdr: hdr, AAAA: ip}
		}
		return nil
	}
	if !strings.EqualFold(q.Name, LoopName+".") {
		return nil
	}
	switch q.Qtype {
	case dns.TypeA:
		return &dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1).To4()}
	case dns.TypeAAAA:
		return &dns.AAAA{Hdr: hdr, AAAA: net.IPv6loopback}
	}
	return nil
}

// StartHostSocks runs go-socks5 on HostSocksAddr in the host namespace until the lab
// closes; its errors go to SocksLog.
func (l *Lab) StartHostSocks(ctx context.Context) error {
	ln, err := l.host.Listen(ctx, "tcp", HostSocksAddr)
	if err != nil {
		return err
	}
	srv := socks5.NewServer(
		socks5.WithDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, socksDialTimeout)
			defer cancel()
			return l.host.Dial(ctx, network, addr)
		}),
		socks5.WithResolver(nsResolver{ns: l.host}),
		socks5.WithLogger(recordLogger{&l.socksLog}),
		socks5.WithAssociateHandle(func(_ context.Context, w io.Writer, _ *socks5.Request) error {
			_ = socks5.SendReply(w, statute.RepCommandNotSupported, nil)
			return errors.New("udp associate is not offered by the host's go-socks5")
		}),
	)
	cs := startConnServer(ln, srv.ServeConn, &l.socksLog)
	l.addUndo(cs.close)
	l.logf("lab %s: go-socks5 on %s in %s", l.id, HostSocksAddr, l.host.Name())
	return nil
}
