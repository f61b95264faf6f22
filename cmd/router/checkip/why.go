package checkip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// whyZone is the reserved name under which the router's DNS answers a guest's why query
// (the DNS server's WhyZone; this package imports none of the router's, so the wire form is
// pinned by tests on both sides): a TXT query for PORT.HOST.why.router.invalid, answered
// with the router's decision for the asking guest's TCP flow to HOST:PORT. Under .invalid
// (RFC 6761), which no other resolver answers: outside a cage the query gets NXDOMAIN.
const whyZone = "why.router.invalid"

// whyDefaultPort is the port --why asks about when HOST has none.
const whyDefaultPort = 443

// ParseWhy reads --why's HOST[:PORT]: a host name, an IPv4 address, or an IPv6 address
// (in brackets with a port); PORT 1-65535, 443 when left out.
func ParseWhy(s string) (host string, port uint16, err error) {
	host, p := s, ""
	if h, pp, err := net.SplitHostPort(s); err == nil {
		host, p = h, pp
	} else if strings.HasPrefix(s, "[") {
		return "", 0, fmt.Errorf("--why %q: not HOST[:PORT]", s)
	}
	port = whyDefaultPort
	if p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", 0, fmt.Errorf("--why %q: %q is not a port 1-65535", s, p)
		}
		port = uint16(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", 0, fmt.Errorf("--why %q: an address with a zone", s)
		}
		return a.Unmap().String(), port, nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !isHostName(host) {
		return "", 0, fmt.Errorf("--why %q: %q is not a host name or an IP address", s, host)
	}
	return host, port, nil
}

// isHostName reports whether h is a host name the router's DNS takes: labels of letters,
// digits, '-' and '_', 1-63 bytes each, 253 in all.
func isHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// WhyName is the why query's name for host (as ParseWhy returns it) and port.
func WhyName(host string, port uint16) string {
	if strings.Contains(host, ":") {
		host = strings.ReplaceAll(host, ":", "-")
	}
	return strconv.Itoa(int(port)) + "." + host + "." + whyZone
}

// why asks the router why a TCP flow of this guest to host:port is refused (or not), prints
// its answer and returns ExitFail when the flow is refused, ExitOK when not, and
// ExitNoAnswer when no router answered.
func why(ctx context.Context, res Resolver, opts Options, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	name := WhyName(opts.WhyHost, opts.WhyPort)
	txt, err := res.LookupTXT(ctx, name)
	if err != nil || len(txt) == 0 {
		var dnsErr *net.DNSError
		what := "no answer"
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			what = "NXDOMAIN"
		case err != nil:
			what = err.Error()
		}
		fmt.Fprintf(stderr, "router check-ip: no router answered the why query %s (%s): this guest is not behind the router's DNS, or the router is older than --why\n", name, what)
		return ExitNoAnswer
	}
	text := strings.Join(txt, "")
	io.WriteString(stdout, strings.TrimSuffix(text, "\n")+"\n")
	if strings.Contains(text, "\nverdict: block") {
		return ExitFail
	}
	return ExitOK
}
