package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/rules/refusal"
)

// maxUDPReply is the largest reply req may get over UDP: 512 without EDNS0, else the
// client's size clamped to [512, 1232].
func maxUDPReply(req *mdns.Msg) int {
	if opt := req.IsEdns0(); opt != nil {
		return min(max(int(opt.UDPSize()), mdns.MinMsgSize), udpSize)
	}
	return mdns.MinMsgSize
}

// HandleWire answers a query in wire format from an unknown source: HandleWireFrom with the
// zero Source, so every such query shares one budget.
func (s *Server) HandleWire(ctx context.Context, query []byte, udp bool) []byte {
	return s.HandleWireFrom(ctx, Source{}, query, udp)
}

// HandleWireFrom answers a query in wire format asked by src (see Source) and returns the
// reply in wire format, or nil when no reply is due (fewer than 12 bytes, or a response). A
// query that does not unpack gets FORMERR. With udp set, the reply is truncated (TC) to what
// the client accepts.
func (s *Server) HandleWireFrom(ctx context.Context, src Source, query []byte, udp bool) []byte {
	var h mdns.Header
	if len(query) < 12 {
		return nil
	}
	h.Id = uint16(query[0])<<8 | uint16(query[1])
	h.Bits = uint16(query[2])<<8 | uint16(query[3])
	if h.Bits&(1<<15) != 0 { // QR
		return nil
	}
	req := new(mdns.Msg)
	var reply *mdns.Msg
	if err := req.Unpack(query); err != nil {
		reply = new(mdns.Msg)
		reply.Id = h.Id
		reply.Response = true
		reply.Opcode = int(h.Bits>>11) & 0xF
		reply.RecursionDesired = h.Bits&(1<<8) != 0
		reply.Rcode = mdns.RcodeFormatError
	} else {
		reply = s.HandleFrom(ctx, src, req)
		if reply == nil {
			return nil
		}
		if udp {
			reply.Truncate(maxUDPReply(req))
		}
	}
	wire, err := reply.Pack()
	if err != nil {
		s.tally.add(evPackFailed, src.key().String(), err.Error)
		return nil
	}
	return wire
}

// ServeDNS implements miekg's dns.Handler, so the server can sit behind any miekg
// dns.Server; the client's address (w.RemoteAddr) is the query's Source. Serve is the usual
// way to run it: it also sets the TCP limits, which a dns.Server of the caller's keeps as
// the caller set them.
func (s *Server) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	s.serveDNS(context.Background(), w, req)
}

func (s *Server) serveDNS(ctx context.Context, w mdns.ResponseWriter, req *mdns.Msg) {
	reply := s.HandleFrom(ctx, sourceOf(w.RemoteAddr()), req)
	if reply == nil {
		return
	}
	if w.LocalAddr().Network() != "tcp" {
		reply.Truncate(maxUDPReply(req))
	}
	if err := w.WriteMsg(reply); err != nil {
		s.tally.add(evWriteFailed, sourceOf(w.RemoteAddr()).key().String(), err.Error)
	}
}

// Serve answers queries on pc (datagrams, UDP) and ln (streams, TCP, RFC 7766) until ctx ends;
// either may be nil, not both. Each query's Source is its client's address. It owns pc and ln
// from the call on and closes them before it returns. It returns nil after ctx ends, or the
// first error of a socket (after closing the other one); accept errors other than a closed
// listener are retried after a pause, never returned.
//
// Over TCP a connection serves any number of queries, one at a time, while each comes within
// an idle timeout of the previous answer; connections are limited per source and in all (see
// tcpPerSource and the others in limits.go).
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	if pc == nil && ln == nil {
		return errors.New("dns serve: no socket")
	}
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) { s.serveDNS(ctx, w, r) })
	accept := func(dh mdns.Header) mdns.MsgAcceptAction {
		if dh.Bits&(1<<15) != 0 {
			return mdns.MsgIgnore
		}
		return mdns.MsgAccept // Handle decides the rest
	}
	type running struct {
		srv     *mdns.Server
		started chan struct{}
		done    chan error
	}
	var all []running
	add := func(srv *mdns.Server) {
		r := running{srv: srv, started: make(chan struct{}), done: make(chan error, 1)}
		srv.Handler, srv.MsgAcceptFunc = h, accept
		srv.NotifyStartedFunc = func() { close(r.started) }
		all = append(all, r)
	}
	if pc != nil {
		add(&mdns.Server{PacketConn: pc, UDPSize: mdns.MaxMsgSize})
	}
	if ln != nil {
		ln = newLimitListener(ln, s.tcpPerSource, s.tcpTotal, func(ev event, k sourceKey, err error) {
			if err != nil {
				s.tally.add(ev, k.String(), err.Error)
				return
			}
			s.tally.add(ev, k.String(), nil)
			if ev == evTCPRefused {
				s.refused(refusal.Limit, k, "")
			}
		})
		idle := s.tcpIdle
		add(&mdns.Server{Listener: ln, MaxTCPQueries: -1, ReadTimeout: s.tcpFirstRead,
			IdleTimeout: func() time.Duration { return idle }})
	}
	failed := make(chan error, len(all))
	for _, r := range all {
		go func() {
			err := r.srv.ActivateAndServe()
			r.done <- err
			failed <- err
		}()
	}
	// Wait until each server runs (so that its shutdown finds it started) or has failed.
	var firstErr error
	for _, r := range all {
		select {
		case <-r.started:
		case err := <-r.done:
			r.done <- err // keep it for the final wait
			if firstErr == nil {
				firstErr = fmt.Errorf("dns serve: %w", err)
			}
		}
	}
	if firstErr == nil {
		select {
		case <-ctx.Done():
		case err := <-failed:
			if err == nil {
				err = errors.New("stopped")
			}
			firstErr = fmt.Errorf("dns serve: %w", err)
		}
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range all {
		r.srv.ShutdownContext(shutCtx) // an error means it was not running any more
	}
	for _, r := range all {
		select {
		case <-r.done:
		case <-shutCtx.Done():
		}
	}
	if pc != nil {
		pc.Close()
	}
	if ln != nil {
		ln.Close()
	}
	if ctx.Err() != nil {
		// Stopped: the stop closes the sockets after it ends ctx, also while they were still
		// starting, and a socket closed by the stop is not a failure.
		return nil
	}
	return firstErr
}
