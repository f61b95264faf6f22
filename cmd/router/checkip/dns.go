package checkip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// dnsAnswer is what the whoami lookups returned.
type dnsAnswer struct {
	addrs []netip.Addr
	txt   []string
	err   error // set when no address came back at all
}

// whoami resolves the whoami name, A/AAAA and TXT at once, and collects the addresses.
func (r *runner) whoami(ctx context.Context) dnsAnswer {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	name := r.opts.DNSWhoami
	var (
		wg         sync.WaitGroup
		addrs      []netip.Addr
		txt        []string
		aErr, tErr error
	)
	wg.Go(func() { addrs, aErr = r.resolver.LookupNetIP(ctx, "ip", name) })
	wg.Go(func() { txt, tErr = r.resolver.LookupTXT(ctx, name) })
	wg.Wait()

	var out dnsAnswer
	seen := map[netip.Addr]bool{}
	add := func(a netip.Addr) {
		a = a.Unmap()
		if a.IsValid() && a.Zone() == "" && !seen[a] {
			seen[a] = true
			out.addrs = append(out.addrs, a)
		}
	}
	for _, a := range addrs {
		add(a)
	}
	for _, t := range txt {
		out.txt = append(out.txt, clean(t))
		for _, f := range strings.FieldsFunc(t, func(c rune) bool {
			return c == ' ' || c == ',' || c == ';' || c == '=' || c == '"' || c == '\t'
		}) {
			if a, err := netip.ParseAddr(f); err == nil {
				add(a)
			}
		}
	}
	if len(out.addrs) == 0 {
		switch {
		case tErr == nil && len(txt) > 0:
			out.err = errors.New("the answer holds no address")
		case aErr != nil:
			out.err = aErr // a *net.DNSError names the lookup already
		default:
			out.err = errors.New("the answer holds no address")
		}
	}
	return out
}

// judgeDNS decides the DNS check against exit (--expect when given, else the echo's answer).
// An answer equal to --expect-not is a leak; one equal to the exit means the resolver's queries leave through the exit; an address
// that is not public means the name was answered locally (a fake-IP resolver) and no query left
// the guest's resolver path; any other public address means DNS leaves by another path.
func (r *runner) judgeDNS(d dnsAnswer, exit netip.Addr) DNSCheck {
	c := DNSCheck{Name: r.opts.DNSWhoami, Answers: d.addrs, TXT: d.txt}
	if d.err != nil {
		c.Status, c.Detail = Fail, fmt.Sprintf("%s did not resolve: %s", clean(c.Name), r.describe(d.err))
		return c
	}
	var leak, other, viaExit, local []string
	for _, a := range d.addrs {
		switch {
		case r.opts.ExpectNot.IsValid() && a == r.opts.ExpectNot:
			leak = append(leak, a.String())
		case a == exit:
			viaExit = append(viaExit, a.String())
		case !isPublic(a):
			local = append(local, a.String())
		default:
			other = append(other, a.String())
		}
	}
	name := clean(c.Name)
	switch {
	case len(leak) > 0:
		c.Status = Fail
		c.Detail = fmt.Sprintf("%s answers %s, the --expect-not address: DNS leaks", name, strings.Join(leak, ", "))
	case len(other) > 0:
		c.Status = Fail
		c.Detail = fmt.Sprintf("%s answers %s, not the exit: DNS leaves by another path "+
			"(fine only if that is the resolver your proxy relays to)", name, strings.Join(other, ", "))
	case len(viaExit) > 0:
		c.Status = Pass
		c.Detail = fmt.Sprintf("%s answers %s: the resolver's queries leave through the exit", name, strings.Join(viaExit, ", "))
	default:
		c.Status = Pass
		c.Detail = fmt.Sprintf("%s answers %s, not a public address: answered locally (fake IP), no query left",
			name, strings.Join(local, ", "))
	}
	return c
}

// isPublic reports whether a is an address a whoami server on the internet can answer with:
// global unicast, not private (RFC 1918, ULA), not shared (100.64.0.0/10) nor benchmarking
// (198.18.0.0/15, where fake-IP resolvers often take their pool). Documentation ranges count as
// public, so a test network built from them behaves like the internet.
func isPublic(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	if a.Is4() {
		b := a.As4()
		if b[0] == 100 && b[1]&0xc0 == 64 || b[0] == 198 && b[1]&0xfe == 18 {
			return false
		}
	}
	return true
}
