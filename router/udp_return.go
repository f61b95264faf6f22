package router

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// maxReplySockets bounds the sockets a SocketReturn holds (one per original destination
// that a live flow has); the flow bounds keep it lower in practice.
const maxReplySockets = 4096

// SocketReturn answers a capture's UDP clients through sockets bound to the original
// destinations (Linux: transparent sockets, nftcap.ListenReply), so that an answer leaves
// from the address the client sent to. A socket is made at the first answer of a flow and
// kept while any flow to that destination lives (Release). Safe for concurrent use; mu
// guards socks.
type SocketReturn struct {
	bind func(from netip.AddrPort) (*net.UDPConn, error)

	mu     sync.Mutex
	socks  map[netip.AddrPort]*replySocket
	closed bool
}

type replySocket struct {
	c       *net.UDPConn
	clients map[netip.AddrPort]struct{}
}

// NewSocketReturn returns a SocketReturn whose sockets bind makes.
func NewSocketReturn(bind func(from netip.AddrPort) (*net.UDPConn, error)) *SocketReturn {
	return &SocketReturn{bind: bind, socks: map[netip.AddrPort]*replySocket{}}
}

// Reply sends p to client from from.
func (s *SocketReturn) Reply(client, from netip.AddrPort, p []byte) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return net.ErrClosed
	}
	rs := s.socks[from]
	if rs == nil {
		if len(s.socks) >= maxReplySockets {
			s.mu.Unlock()
			return errors.New("reply sockets: too many destinations")
		}
		c, err := s.bind(from)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("reply socket %v: %w", from, err)
		}
		rs = &replySocket{c: c, clients: map[netip.AddrPort]struct{}{}}
		s.socks[from] = rs
	}
	rs.clients[client] = struct{}{}
	s.mu.Unlock()
	_, err := rs.c.WriteToUDPAddrPort(p, client)
	return err
}

// Release forgets the flow client → from; the socket of from closes with its last flow.
func (s *SocketReturn) Release(client, from netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.socks[from]
	if rs == nil {
		return
	}
	delete(rs.clients, client)
	if len(rs.clients) == 0 {
		rs.c.Close()
		delete(s.socks, from)
	}
}

// Len is how many sockets are open.
func (s *SocketReturn) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.socks)
}

// Close closes every socket; later replies fail.
func (s *SocketReturn) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for from, rs := range s.socks {
		rs.c.Close()
		delete(s.socks, from)
	}
	return nil
}
