package dns

import (
	"net/netip"
	"strconv"
	"strings"

	mdns "github.com/miekg/dns"
)

// WhyZone is the reserved name under which a client asks the router why a destination is
// refused to it: a TXT query for PORT.HOST.why.router.invalid (HOST a name, an IPv4 address,
// or an IPv6 address with each ':' written '-') is answered by this server itself, in every
// mode, with what Why says about the asking client (Source) and that destination: one TXT
// record whose strings, joined, are its lines separated by line feeds. The answer is the asking client's alone: the server judges the source
// the query came from, never one the query names. Under .invalid (RFC 6761), which no other
// resolver answers, so a client outside the cage gets NXDOMAIN, never another's answer.
const WhyZone = "why.router.invalid"

// Why is the router's policy as the DNS server asks it for a client's why query (WhyZone).
// Methods are called concurrently.
type Why interface {
	// Why says, in lines of plain text, how a TCP flow of src to host (a name, or an
	// address in text) on port would be decided and why: no secret, a rule's name never its
	// config's values.
	Why(src Source, host string, port uint16) []string
}

// answerWhy answers m, and reports true, when name is under WhyZone and the server has a
// Why: TXT with Why's lines, no data for other types, NXDOMAIN for a name that is not
// PORT.HOST.
func (s *Server) answerWhy(src Source, q mdns.Question, name string, m *mdns.Msg) bool {
	if s.why == nil || !underOrAt(name, WhyZone) {
		return false
	}
	host, port, ok := parseWhyName(name)
	switch {
	case !ok:
		s.negative(m, mdns.RcodeNameError)
	case q.Qtype != mdns.TypeTXT:
		s.negative(m, mdns.RcodeSuccess)
	default:
		// One record, its lines joined by line feeds, cut in strings of 255 bytes: a
		// resolver may reorder the records of a set, and joins a record's strings
		// (Go's LookupTXT does), so the text comes back whole and in order.
		var txt []string
		text := strings.Join(s.why.Why(src, host, port), "\n")
		for len(text) > 255 {
			txt, text = append(txt, text[:255]), text[255:]
		}
		txt = append(txt, text)
		// TTL 0: the answer is the running config's, which a reload may change.
		m.Answer = []mdns.RR{&mdns.TXT{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeTXT, Class: mdns.ClassINET}, Txt: txt}}
	}
	return true
}

// parseWhyName reads PORT.HOST.why.router.invalid (name canonical: lower case, no trailing
// dot): HOST a host name or an address, PORT 1-65535.
func parseWhyName(name string) (host string, port uint16, ok bool) {
	rest, found := strings.CutSuffix(name, "."+WhyZone)
	if !found {
		return "", 0, false
	}
	p, host, found := strings.Cut(rest, ".")
	if !found {
		return "", 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || p[0] == '0' {
		return "", 0, false
	}
	if strings.Contains(host, "-") && !strings.Contains(host, ".") {
		if a, err := netip.ParseAddr(strings.ReplaceAll(host, "-", ":")); err == nil && a.Is6() && a.Zone() == "" {
			return a.String(), uint16(n), true
		}
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return a.String(), uint16(n), true
	}
	if !isHostname(host) {
		return "", 0, false
	}
	return host, uint16(n), true
}
