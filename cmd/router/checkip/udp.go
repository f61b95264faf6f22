package checkip

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

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
