package upstream

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/agentcage/router/router/upstream/socks5"
)

// association is a SOCKS5 UDP association: the TCP control connection that
// keeps it alive, and a UDP socket connected to the relay (so the kernel
// takes datagrams from the relay's address only).
//
// A goroutine reads the control connection for as long as it lives: the
// proxy sends nothing on it after its reply, so any byte or end there
// means the association is over (RFC 1928 §7: it ends with the TCP
// connection). A control connection that dies without a FIN or a reset (the
// proxy's host gone) is noticed by TCP keepalive, which Go's dialer turns
// on by default (a dead peer is found within minutes). end records the first
// cause, closes done and both sockets, which wakes blocked readers and
// writers.
type association struct {
	upstream string
	ctrl     net.Conn
	udp      net.Conn
	relay    netip.AddrPort
	log      *slog.Logger
	done     chan struct{}
	watcher  sync.WaitGroup
	bufs     sync.Pool // *[]byte for outgoing datagrams

	once sync.Once
	mu   sync.Mutex // guards err
	err  error      // why it ended; written once, before done is closed
}

// maxDatagram is the longest datagram a relay can send or take: the UDP
// payload limit of IPv4.
const maxDatagram = 65535 - 8 - 20

func newAssociation(upstream string, ctrl, udp net.Conn, relay netip.AddrPort, log *slog.Logger) *association {
	a := &association{upstream: upstream, ctrl: ctrl, udp: udp, relay: relay, log: log, done: make(chan struct{})}
	a.bufs.New = func() any {
		b := make([]byte, 0, socks5.MaxUDPHeaderLen+maxDatagram)
		return &b
	}
	a.watcher.Go(func() {
		var b [1]byte
		n, err := a.ctrl.Read(b[:])
		if n > 0 {
			err = fmt.Errorf("proxy sent 0x%02x on it", b[0])
		}
		a.end(fmt.Errorf("upstream %s: %w: %w", upstream, ErrAssociationLost, err))
	})
	return a
}

// end ends the association once, with cause err.
func (a *association) end(err error) {
	a.once.Do(func() {
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
		close(a.done)
		a.ctrl.Close()
		a.udp.Close()
	})
}

func (a *association) Done() <-chan struct{} { return a.done }

func (a *association) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Close ends the association and waits for its watcher.
func (a *association) Close() error {
	a.end(fmt.Errorf("upstream %s: udp association: %w", a.upstream, net.ErrClosed))
	a.watcher.Wait()
	return nil
}

// ended returns the association's end cause, or nil while it lives.
func (a *association) ended() error {
	select {
	case <-a.done:
		return a.Err()
	default:
		return nil
	}
}

func (a *association) WriteTo(p []byte, dst Addr) (int, error) {
	if err := a.ended(); err != nil {
		return 0, err
	}
	bp := a.bufs.Get().(*[]byte)
	defer a.bufs.Put(bp)
	b, err := socks5.AppendUDPHeader((*bp)[:0], dst)
	if err != nil {
		return 0, fmt.Errorf("send datagram via %s: %w", a.upstream, err)
	}
	b = append(b, p...)
	*bp = b[:0]
	if _, err := a.udp.Write(b); err != nil {
		if end := a.ended(); end != nil {
			return 0, end
		}
		return 0, fmt.Errorf("send datagram to %v via %s: %w", dst, a.upstream, err)
	}
	return len(p), nil
}

func (a *association) ReadFrom(p []byte) (int, Addr, error) {
	for {
		n, err := a.udp.Read(p)
		if err != nil {
			if end := a.ended(); end != nil {
				return 0, Addr{}, end
			}
			return 0, Addr{}, fmt.Errorf("read datagram via %s: %w", a.upstream, err)
		}
		src, hl, err := socks5.ParseUDPHeader(p[:n])
		if err != nil {
			a.log.Debug("udp datagram dropped", "upstream", a.upstream, "relay", a.relay, "len", n, "err", err)
			continue
		}
		return copy(p, p[hl:n]), src, nil
	}
}
