package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/agentcage/router/router/upstream/socks5"
)

// Handshake is one CONNECT through a [Tracked] SOCKS5 upstream that its caller drives itself,
// with non-blocking I/O on a socket of its own (the router's event loop), where Connect would
// hold a goroutine for the whole set-up. The wire rules are [socks5.Exchange]'s; what the
// upstream adds is Connect's: the proxy's address, its credentials and pipelining, what a
// failure says ([Error]: Refused, Sent) and the health it feeds. The steps:
//
//	Begin        the proxy's address (false: this upstream needs Connect, see Begin)
//	             the caller opens its own socket (marked, like Options.Dial's) and connects
//	             it to that address without blocking
//	Start        once connected: the bytes to send; when Pipelined, the client's first
//	             bytes go right after them, in the same write
//	Feed, Cut    the proxy's answers, as socks5.Exchange takes them
//	End          the outcome, exactly once: nil for success, or the cause (from Start,
//	             DialFailed, WriteFailed, Feed, Cut or Expired); it feeds the health as
//	             Connect would and returns the *Error to report
//	Abandon      instead of End: the caller gave up (the router is closing), which counts
//	             for nothing, like a cancelled Connect
//
// The zero Handshake is unused; one goroutine drives it at a time. It holds no descriptor
// and nothing to close.
type Handshake struct {
	t     *Tracked
	su    *socksUpstream
	x     socks5.Exchange
	dst   Addr
	addrs []netip.Addr // the remembered addresses used (a named proxy), forgotten if the dial fails
	start time.Time
	trial bool
	ended bool
	early int // the client's bytes sent along with the request
	read  int // bytes of the proxy's answers taken (consumed, or there at the cut)
}

// Begin starts a Handshake to dst through t, counted like a Connect from now on (the trial
// after a backoff included), and returns the address to connect to. ok is false when t is
// not a SOCKS5 upstream, or its host is a name without exactly one address remembered (the
// first lookup, or several addresses to try in turn), or is reached through another proxy
// (Options.Via): then Connect is the way, and h is untouched.
func (t *Tracked) Begin(h *Handshake, dst Addr) (proxy netip.AddrPort, ok bool) {
	su, ok := t.up.(*socksUpstream)
	if !ok || su.ep.via != nil {
		return netip.AddrPort{}, false // not SOCKS5, or reached through another proxy
	}
	ep := su.ep
	a, addrs := ep.literal, []netip.Addr(nil)
	if !a.IsValid() {
		ep.mu.Lock()
		addrs = ep.addrs
		ep.mu.Unlock()
		if len(addrs) != 1 {
			return netip.AddrPort{}, false
		}
		a = addrs[0]
	}
	*h = Handshake{t: t, su: su, dst: dst, addrs: addrs}
	h.trial, h.start = t.begin()
	return netip.AddrPortFrom(a, ep.port), true
}

// Pipelined reports whether the request goes out with the greeting, and the client's first
// bytes right after it in the same write.
func (h *Handshake) Pipelined() bool { return h.su.pipeline }

// LeastAnswer is the fewest bytes the proxy sends before its reply is complete, when
// Pipelined: its answers before the reply and the shortest reply. A caller may wait for that
// many (SO_RCVLOWAT) instead of waking for each answer.
func (h *Handshake) LeastAnswer() int { return h.su.answerLen() + socks5.MinReplyLen }

// Start appends the first bytes to send to out. early is how many of the client's bytes the
// caller sends right after them, in the same write (0 unless Pipelined).
func (h *Handshake) Start(out []byte, early int) ([]byte, error) {
	if h.su.pipeline {
		h.early = early
	}
	return h.x.Start(&h.su.client, h.dst, out)
}

// Feed takes the proxy's bytes not yet consumed (see socks5.Exchange.Feed).
func (h *Handshake) Feed(in, out []byte) (n int, next []byte, err error) {
	n, next, err = h.x.Feed(in, out)
	h.read += n
	return n, next, err
}

// Need is socks5.Exchange.Need.
func (h *Handshake) Need(in []byte) int { return h.x.Need(in) }

// Done reports whether the proxy's reply said success: the connection carries the
// destination's bytes.
func (h *Handshake) Done() bool { return h.x.Done() }

// Cut is the cause of a handshake whose stream from the proxy ended (io.EOF) or failed
// (err) with in unconsumed.
func (h *Handshake) Cut(in []byte, err error) error {
	h.read += len(in)
	return h.x.Cut(in, err)
}

// WriteFailed is the cause of a handshake whose bytes could not be sent.
func (h *Handshake) WriteFailed(err error) error { return h.x.WriteFailed(err) }

// DialFailed is the cause of a handshake whose connect to the proxy failed; the remembered
// addresses of a named proxy are forgotten (the next flow looks the name up again), as
// Connect does.
func (h *Handshake) DialFailed(err error) error {
	if h.addrs != nil {
		h.su.ep.forget(h.addrs)
	}
	return fmt.Errorf("dial proxy %s: %w", h.su.ep, err)
}

// Expired is the cause of a handshake that ran out of time: before the connection to the
// proxy was made (connected false), or while waiting for its answers (in: the bytes not yet
// consumed). Like a Connect whose context's deadline passed, it wraps
// context.DeadlineExceeded.
func (h *Handshake) Expired(connected bool, in []byte) error {
	var err error
	if connected {
		err = h.Cut(in, os.ErrDeadlineExceeded)
	} else {
		err = h.DialFailed(fmt.Errorf("connect: %w", os.ErrDeadlineExceeded))
	}
	return fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
}

// End records the handshake's outcome in the upstream's health, once: nil for a success,
// otherwise the cause, which it returns as an *Error (Refused when the proxy refused the
// destination; Sent when pipelined early bytes may have reached it). Later calls return nil
// and record nothing.
func (h *Handshake) End(cause error) error {
	if h.ended {
		return nil
	}
	h.ended = true
	if cause == nil {
		h.t.report(h.start, nil, h.trial, false)
		return nil
	}
	// As Connect: once the answers before the reply are in, the proxy has read the request,
	// and may have connected and relayed the early bytes, unless it says it did not.
	sent := h.su.pipeline && h.early > 0 && h.read >= h.su.answerLen() && !isReply(cause) &&
		!errors.Is(cause, socks5.ErrAuthFailed) && !errors.Is(cause, socks5.ErrNoAcceptableMethods)
	err := &Error{Upstream: h.su.name, Op: "connect", Dst: h.dst, Refused: isRefusal(cause), Sent: sent, Err: cause}
	h.t.report(h.start, err, h.trial, false)
	return err
}

// Abandon ends a handshake its caller gave up on: it counts for nothing (a trial after a
// backoff is released for the next flow). After End it does nothing.
func (h *Handshake) Abandon() {
	if h.ended {
		return
	}
	h.ended = true
	h.t.report(h.start, context.Canceled, h.trial, false)
}
