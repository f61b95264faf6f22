package checkip

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// exit asks the echo endpoints in order until one answers and judges the address.
func (r *runner) exit(ctx context.Context) ExitCheck {
	var c ExitCheck
	var lastErr string
	for _, u := range r.echo {
		if ctx.Err() != nil {
			break
		}
		at, err := r.fetchEcho(ctx, r.client, u)
		c.Attempts = append(c.Attempts, at)
		if err != nil {
			lastErr = at.Err
			r.log.Debug("echo attempt failed", "url", u, "err", err)
			continue
		}
		c.Address, c.URL = at.Address, u
		break
	}
	a, via, after := c.Address, "", ""
	if a.IsValid() {
		via = fmt.Sprintf("%s via %s", a, c.URL)
		if failed := len(c.Attempts) - 1; failed > 0 {
			after = fmt.Sprintf(" (after %d endpoint%s failed)", failed, plural(failed))
		}
	}
	switch {
	case !a.IsValid() && ctx.Err() != nil:
		c.Status, c.Detail = Unknown, "interrupted before an echo endpoint answered"
	case !a.IsValid():
		c.Status = Unknown
		c.Detail = fmt.Sprintf("no echo endpoint answered (%d tried; last: %s)", len(c.Attempts), lastErr)
	case r.opts.ExpectNot.IsValid() && a == r.opts.ExpectNot:
		c.Status, c.Detail = Fail, via+": this is the --expect-not address"
	case r.opts.Expect.IsValid() && a != r.opts.Expect:
		c.Status, c.Detail = Fail, fmt.Sprintf("%s, expected %s", via, r.opts.Expect)
	case r.opts.Expect.IsValid():
		c.Status, c.Detail = Pass, via+", as expected"
	default:
		c.Status, c.Detail = Pass, via
	}
	c.Detail += after
	return c
}

// fetchEcho asks one echo endpoint. The error is also in the Attempt, as text.
func (r *runner) fetchEcho(ctx context.Context, client *http.Client, u string) (Attempt, error) {
	start := time.Now()
	body, _, err := r.get(ctx, client, u, "text/plain, application/json;q=0.9, */*;q=0.1", MaxEchoBody)
	at := Attempt{URL: u}
	var a netip.Addr
	if err == nil {
		a, err = ParseEcho(body)
	}
	at.Elapsed = time.Since(start)
	if err != nil {
		at.Err = r.describe(err)
		return at, err
	}
	at.Address = a
	return at, nil
}

// get fetches u with one attempt bounded by the timeout and returns the body, read up to max
// bytes, and the HTTP status (0 without a response). A status other than 2xx is an error.
func (r *runner) get(ctx context.Context, client *http.Client, u, accept string, max int64) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("User-Agent", "router-check-ip")
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is reported next to the error already; ue.Err names its operation
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, resp.StatusCode, fmt.Errorf("http status %q", resp.Status)
	}
	body, err := readBounded(resp.Body, max)
	return body, resp.StatusCode, err
}

// describe turns an error into the short, printable text the report carries.
func (r *runner) describe(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer within " + r.timeout.String()
	}
	return clean(err.Error())
}

// model fetches the model list.
func (r *runner) model(ctx context.Context) ModelCheck {
	m := ModelCheck{URL: r.modelURL}
	start := time.Now()
	body, status, err := r.get(ctx, r.client, r.modelURL, "application/json", MaxModelBody)
	var ids []string
	if err == nil {
		ids, err = ParseModels(body)
	}
	m.Elapsed, m.HTTPStatus = time.Since(start), status
	took := formatDuration(m.Elapsed)
	switch {
	case err != nil:
		m.Status, m.Detail = Fail, fmt.Sprintf("%s: %s", m.URL, r.describe(err))
	case len(ids) == 0:
		m.Status, m.Detail = Fail, fmt.Sprintf("%s answered in %s but lists no model", m.URL, took)
	default:
		m.IDs = ids
		const show = 5
		list := make([]string, 0, show)
		for i, id := range ids {
			if i == show {
				break
			}
			list = append(list, clean(id))
		}
		more := ""
		if len(ids) > show {
			more = fmt.Sprintf(" and %d more", len(ids)-show)
		}
		m.Status = Pass
		m.Detail = fmt.Sprintf("%s%s in %s from %s", strings.Join(list, ", "), more, took, m.URL)
	}
	return m
}

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

// udpReply is what came back to one STUN probe.
type udpReply struct {
	target string
	from   netip.AddrPort
	mapped netip.AddrPort // invalid when the reply was not a STUN answer
	size   int
}

// udpOutcome is what the STUN probes saw.
type udpOutcome struct {
	targets     []string
	sent        int        // sockets that sent a request
	replies     []udpReply // in arrival order
	refused     int        // sockets that got an ICMP error back instead of a reply
	unreachable int        // destinations without a route
	errs        []string   // other failures: resolve, dial, send
	interrupted bool
}

// udp sends STUN binding requests to every target address at once (three times, at 0, 1/4 and
// 1/2 of the timeout, since UDP may be lost) and waits up to the timeout; the first reply ends
// the wait.
func (r *runner) udp(ctx context.Context) udpOutcome {
	o := udpOutcome{targets: r.stun}
	type dst struct {
		target string
		ap     netip.AddrPort
	}
	// Resolve the targets at once; each lookup is bounded by the timeout.
	found := make([][]dst, len(r.stun))
	errs := make([]string, len(r.stun))
	var lwg sync.WaitGroup
	for i, t := range r.stun {
		lwg.Go(func() {
			host, port, _ := net.SplitHostPort(t) // validated in newRunner
			p, _ := strconv.ParseUint(port, 10, 16)
			addrs, err := r.lookup(ctx, host)
			if err != nil {
				errs[i] = fmt.Sprintf("%s: %s", clean(t), r.describe(err))
				return
			}
			for j, a := range addrs {
				if j == 4 {
					break
				}
				found[i] = append(found[i], dst{t, netip.AddrPortFrom(a, uint16(p))})
			}
		})
	}
	lwg.Wait()
	var dsts []dst
	for i := range r.stun {
		dsts = append(dsts, found[i]...)
		if errs[i] != "" {
			o.errs = append(o.errs, errs[i])
		}
	}

	wctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	// A deadline of ctx's that comes before our own cuts the wait short: silence then proves
	// less than it claims, so the check is undecided.
	own := time.Now().Add(r.timeout)
	cut := false
	if d, ok := ctx.Deadline(); ok && d.Before(own) {
		cut = true
	}
	var mu sync.Mutex // guards o while the probes run
	var wg sync.WaitGroup
	for _, d := range dsts {
		wg.Go(func() {
			reply, sent, err := r.stunProbe(wctx, d.ap)
			mu.Lock()
			defer mu.Unlock()
			if sent {
				o.sent++
			}
			switch {
			case reply != nil:
				reply.target = d.target
				o.replies = append(o.replies, *reply)
				cancel() // one reply settles it
			case err == nil:
			case isRefused(err):
				o.refused++
			case isUnreachable(err):
				o.unreachable++
			default:
				o.errs = append(o.errs, fmt.Sprintf("%s (%s): %s", clean(d.target), d.ap, r.describe(err)))
			}
		})
	}
	wg.Wait()
	o.interrupted = ctx.Err() != nil || cut
	return o
}

// lookup resolves host through the Resolver unless it is an address already.
func (r *runner) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	addrs, err := r.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve: %w", err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", host)
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// stunProbe sends a binding request to ap and waits for any reply until ctx ends. reply is nil
// when nothing came back; err is nil when that was silence (ctx ended), and says why otherwise.
func (r *runner) stunProbe(ctx context.Context, ap netip.AddrPort) (reply *udpReply, sent bool, err error) {
	conn, err := r.dialer.DialContext(ctx, "udp", ap.String())
	if err != nil {
		return nil, false, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	// A cancelled ctx (another probe got a reply) wakes a blocked Read.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()

	var txid [12]byte
	rand.Read(txid[:])
	req := STUNRequest(txid)
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(r.timeout)
	}
	total := deadline.Sub(start)
	buf := make([]byte, 2048)
	for sends := 0; ; {
		if sends < 3 {
			if _, err := conn.Write(req); err != nil {
				return nil, sent, fmt.Errorf("send: %w", err)
			}
			sends++
			sent = true
		}
		next := deadline
		if sends < 3 {
			next = start.Add(total * time.Duration(sends) / 4)
		}
		conn.SetReadDeadline(next)
		if ctx.Err() != nil {
			return nil, sent, nil
		}
		n, err := conn.Read(buf)
		if err == nil {
			rep := &udpReply{from: ap, size: n}
			if m, perr := ParseSTUNResponse(buf[:n], txid); perr == nil {
				rep.mapped = m
			}
			return rep, sent, nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if ctx.Err() != nil || !time.Now().Before(deadline) {
				return nil, sent, nil
			}
			continue
		}
		return nil, sent, fmt.Errorf("receive: %w", err)
	}
}

// judgeUDP decides the UDP check against exit (--expect when given, else the echo's answer): a
// reply means UDP got out (unless the STUN server saw the exit, i.e. UDP went through the proxy); silence passes, and says it only means that
// nothing answered.
func (r *runner) judgeUDP(o udpOutcome, exit netip.Addr) UDPCheck {
	c := UDPCheck{Targets: o.targets}
	var best *udpReply
	for i := range o.replies {
		rep := &o.replies[i]
		if best == nil || r.udpWorse(*rep, *best, exit) {
			best = rep
		}
	}
	if best != nil {
		c.From, c.Mapped = best.from, best.mapped
		m := best.mapped.Addr()
		switch {
		case !best.mapped.IsValid():
			c.Status = Fail
			c.Detail = fmt.Sprintf("UDP gets out: %s (%s) replied with %d bytes that are not STUN",
				clean(best.target), best.from, best.size)
		case r.opts.ExpectNot.IsValid() && m == r.opts.ExpectNot:
			c.Status = Fail
			c.Detail = fmt.Sprintf("UDP gets out directly: STUN %s saw %s, the --expect-not address", clean(best.target), m)
		case m == exit:
			c.Status = Pass
			c.Detail = fmt.Sprintf("UDP goes through the exit: STUN %s saw %s", clean(best.target), m)
		default:
			c.Status = Fail
			c.Detail = fmt.Sprintf("UDP gets out directly: STUN %s saw %s, not the exit", clean(best.target), m)
		}
		return c
	}
	switch {
	case o.interrupted:
		c.Status, c.Detail = Unknown, "interrupted before the wait for UDP replies ended"
	case o.sent == 0 && o.unreachable > 0 && len(o.errs) == 0:
		c.Status, c.Detail = Pass, "no route for UDP to any STUN target"
	case o.sent == 0:
		c.Status, c.Detail = Unknown, "not probed: "+strings.Join(o.errs, "; ")
	case o.refused > 0:
		c.Status = Pass
		c.Detail = fmt.Sprintf("no STUN answer within %s; %d refused (an ICMP error came back: blocked on the way, or a closed port)",
			r.timeout, o.refused)
	default:
		c.Status = Pass
		c.Detail = fmt.Sprintf("no answer from %d STUN address%s within %s (silence only means nothing answered)",
			o.sent, pluralES(o.sent), r.timeout)
	}
	return c
}

// udpWorse orders replies so the report shows the most alarming one.
func (r *runner) udpWorse(a, b udpReply, exit netip.Addr) bool {
	rank := func(x udpReply) int {
		m := x.mapped.Addr()
		switch {
		case r.opts.ExpectNot.IsValid() && m == r.opts.ExpectNot:
			return 3
		case !x.mapped.IsValid():
			return 1
		case m == exit:
			return 0
		}
		return 2
	}
	return rank(a) > rank(b)
}

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

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pluralES(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

// formatDuration prints d in milliseconds with at most one decimal, or seconds above 10 s.
func formatDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}
