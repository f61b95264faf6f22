package checkip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// v6Outcome is what the IPv6 probe saw.
type v6Outcome struct {
	route       bool  // the route lookup succeeded
	routeErr    error // why it did not
	attempts    []Attempt
	noAddr      int // attempts that failed because the endpoint has no IPv6 address
	addr        netip.Addr
	url         string
	interrupted bool
}

// ipv6 looks up a route to the IPv6 route target (a UDP connect, no packet) and, unless there
// is plainly none, asks the echo6 endpoints over IPv6 only, in order, until one answers.
func (r *runner) ipv6(ctx context.Context) v6Outcome {
	var o v6Outcome
	o.route, o.routeErr = r.v6Route(ctx)
	if !o.route && noIPv6(o.routeErr) {
		return o
	}
	for _, u := range r.echo6 {
		if ctx.Err() != nil {
			break
		}
		at, err := r.fetchEcho(ctx, r.client6, u)
		o.attempts = append(o.attempts, at)
		if err == nil {
			o.addr, o.url = at.Address, u
			break
		}
		if noIPv6Address(err) {
			o.noAddr++
		}
	}
	o.interrupted = ctx.Err() != nil
	return o
}

func (r *runner) v6Route(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c, err := r.dialer.DialContext(ctx, "udp6", r.opts.IPv6Route.String())
	if err != nil {
		return false, fmt.Errorf("route lookup: %w", err)
	}
	c.Close()
	return true, nil
}

// judgeIPv6 decides the IPv6 check against exit (--expect when given, else the echo's answer):
// an answer over IPv6 from an address other than the exit is a direct IPv6 exit; no route passes; a route with nothing answering passes too, unless no
// endpoint had an IPv6 address at all (then nothing was tried and the check cannot decide).
func (r *runner) judgeIPv6(o v6Outcome, exit netip.Addr) IPv6Check {
	c := IPv6Check{Route: o.route, Address: o.addr, URL: o.url, Attempts: o.attempts}
	a := o.addr
	switch {
	case a.IsValid() && r.opts.ExpectNot.IsValid() && a == r.opts.ExpectNot:
		c.Status, c.Detail = Fail, fmt.Sprintf("IPv6 gets out directly: %s saw %s, the --expect-not address", o.url, a)
	case a.IsValid() && a == exit:
		c.Status, c.Detail = Pass, fmt.Sprintf("IPv6 goes out as %s, the exit address (%s)", a, o.url)
	case a.IsValid():
		c.Status, c.Detail = Fail, fmt.Sprintf("IPv6 gets out directly: %s saw %s, not the exit", o.url, a)
	case !o.route && noIPv6(o.routeErr):
		c.Status, c.Detail = Pass, "no IPv6 route: IPv6 cannot get out directly"
	case o.interrupted:
		c.Status, c.Detail = Unknown, "interrupted before an IPv6 answer or the last attempt"
	case len(o.attempts) > 0 && o.noAddr == len(o.attempts):
		c.Status = Unknown
		c.Detail = r.v6RouteText(o) + ", but no echo endpoint has an IPv6 address, so nothing was tried " +
			"(give --echo6 a URL with an IPv6 address)"
	default:
		last := ""
		if n := len(o.attempts); n > 0 {
			last = "; last: " + o.attempts[n-1].Err
		}
		c.Status = Pass
		c.Detail = fmt.Sprintf("%s, but no echo endpoint answered over IPv6 (%d tried%s)", r.v6RouteText(o), len(o.attempts), last)
	}
	return c
}

// v6RouteText says what the route lookup found, for a check that went on to the endpoints.
func (r *runner) v6RouteText(o v6Outcome) string {
	if o.route {
		return "an IPv6 route exists"
	}
	return "the IPv6 route lookup failed (" + r.describe(o.routeErr) + ")"
}

// noIPv6 reports whether a route-lookup error means the guest has no IPv6 route, address or
// stack at all.
func noIPv6(err error) bool {
	return err != nil && (isUnreachable(err) || isNoIPv6Stack(err))
}

// noIPv6Address reports whether a dial failed because the destination has no IPv6 address
// (an IPv4 literal, or a name without AAAA), so nothing was sent.
func noIPv6Address(err error) bool {
	var ae *net.AddrError
	if errors.As(err, &ae) && strings.Contains(ae.Err, "no suitable address") {
		return true
	}
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
