package upstream

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"

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
	rbuf     []byte    // the one reader's buffer when p is shorter than ReadBufLen; made at its first use

	once sync.Once
	mu   sync.Mutex // guards err
	err  error      // why it ended; written once, before done is closed
}

// MaxDatagram is the longest payload a UDP datagram can carry over IPv4
// (65,535 less the IP and UDP headers): the largest answer a relay on an
// IPv4 address can be handed by its destination.
const MaxDatagram = 65535 - 8 - 20

// ReadBufLen is a buffer that no UDP datagram (of IPv4 or IPv6, with or
// without a SOCKS5 header) fills: a read into it is never cut short, so a
// read that fills it is known to have been cut.
const ReadBufLen = socks5.MaxUDPHeaderLen + 65535 + 1

// ErrTooLarge means that a datagram was dropped whole because the path could
// not carry it: an answer longer than the reader's buffer, or a datagram that
// with the relay's header exceeds what a UDP socket can send. The
// association lives on; the caller counts the drop. Nothing is ever cut.
var ErrTooLarge = errors.New("datagram too large for the path: dropped whole")

// TooLarge reports whether err says a datagram was too large to carry: ErrTooLarge, or
// the kernel's EMSGSIZE.
func TooLarge(err error) bool {
	return errors.Is(err, ErrTooLarge) || errors.Is(err, syscall.EMSGSIZE)
}

func newAssociation(upstream string, ctrl, udp net.Conn, relay netip.AddrPort, log *slog.Logger) *association {
	a := &association{upstream: upstream, ctrl: ctrl, udp: udp, relay: relay, log: log, done: make(chan struct{})}
	a.bufs.New = func() any {
		b := make([]byte, 0, socks5.MaxUDPHeaderLen+65535)
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
		if TooLarge(err) {
			return 0, fmt.Errorf("send %d bytes to %v via %s: %w: %w", len(p), dst, a.upstream, ErrTooLarge, err)
		}
		return 0, fmt.Errorf("send datagram to %v via %s: %w", dst, a.upstream, err)
	}
	return len(p), nil
}

func (a *association) ReadFrom(p []byte) (int, Addr, error) {
	buf := p
	if len(p) < ReadBufLen {
		if a.rbuf == nil {
			a.rbuf = make([]byte, ReadBufLen)
		}
		buf = a.rbuf
	}
	for {
		n, err := a.udp.Read(buf)
		if err != nil {
			if end := a.ended(); end != nil {
				return 0, Addr{}, end
			}
			return 0, Addr{}, fmt.Errorf("read datagram via %s: %w", a.upstream, err)
		}
		if n == len(buf) { // cut by the kernel: longer than any datagram can be
			a.log.Debug("udp datagram dropped: cut short", "upstream", a.upstream, "relay", a.relay, "len", n)
			continue
		}
		src, hl, err := socks5.ParseUDPHeader(buf[:n])
		if err != nil {
			a.log.Debug("udp datagram dropped", "upstream", a.upstream, "relay", a.relay, "len", n, "err", err)
			continue
		}
		if n-hl > len(p) {
			return n - hl, src, fmt.Errorf("answer of %d bytes from %v via %s for a %d-byte buffer: %w", n-hl, src, a.upstream, len(p), ErrTooLarge)
		}
		return copy(p, buf[hl:n]), src, nil
	}
}
