package dns

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/internal/accept"
)

// Limits on what a source may hold of the server. Sources are keyed as Source.key says.
const (
	// maxInflightPerSource and maxInflight bound the queries waiting for an upstream (the
	// resolver through the proxy, or the host's for direct_names): a query beyond them gets
	// SERVFAIL at once instead of a goroutine and a timer for up to Config.Timeout. Cache hits
	// and local answers are never limited.
	maxInflightPerSource = 32
	maxInflight          = 256

	// tcpPerSource and tcpTotal bound the DNS-over-TCP connections Serve holds open: a
	// source's connection beyond tcpPerSource is closed at accept; at tcpTotal the least
	// recently active connection of the source holding the most is closed to make room,
	// when that source holds at least two more than the newcomer's would, else the newcomer
	// is closed. A connection serves any number of queries, one at a time, while the next
	// query starts within tcpIdle of the previous answer (the first must arrive within
	// tcpFirstRead of the connect).
	tcpPerSource = 16
	tcpTotal     = 256
	tcpIdle      = 10 * time.Second
	tcpFirstRead = 2 * time.Second
)

var errBusy = errors.New("too many queries of this source waiting for an upstream")

// gate counts the queries in flight to an upstream, per source and in all. mu guards n and
// by; by holds only sources with a query in flight, so it stays within total entries.
type gate struct {
	perSource, total int

	mu sync.Mutex
	n  int
	by map[sourceKey]int
}

func newGate(perSource, total int) *gate {
	return &gate{perSource: perSource, total: total, by: make(map[sourceKey]int)}
}

// enter takes a slot for k; false when k or everyone is at the limit. A true enter must be
// followed by one leave.
func (g *gate) enter(k sourceKey) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= g.total || g.by[k] >= g.perSource {
		return false
	}
	g.n++
	g.by[k]++
	return true
}

func (g *gate) leave(k sourceKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.by[k]--; g.by[k] <= 0 {
		delete(g.by, k)
	}
}

// limitListener wraps Serve's TCP listener with the tcpPerSource and tcpTotal limits (fields
// so that tests can lower them) and retries accept errors after a pause; only a closed
// listener ends Accept. note, when not nil, is told of each refused or evicted connection and
// of each failed accept.
//
// mu guards conns and n. Close closes the wrapped listener; the connections it handed out
// stay open until their own Close.
type limitListener struct {
	net.Listener
	perSource, total int
	note             func(ev event, k sourceKey, err error)

	done      chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	conns map[sourceKey][]*limitConn
	n     int
}

func newLimitListener(ln net.Listener, perSource, total int, note func(event, sourceKey, error)) *limitListener {
	return &limitListener{Listener: ln, perSource: perSource, total: total, note: note,
		done: make(chan struct{}), conns: make(map[sourceKey][]*limitConn)}
}

// limitConn is an accepted connection; it remembers when it last read and gives its slot back
// on Close (or when the listener evicts it).
type limitConn struct {
	net.Conn
	l        *limitListener
	key      sourceKey
	lastRead atomic.Int64 // unix nanoseconds
	dropped  bool         // guarded by l.mu: its slot is given back
}

func (c *limitConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *limitConn) Close() error {
	c.l.mu.Lock()
	c.l.dropLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Accept returns the next connection within the limits, closing those beyond them.
func (l *limitListener) Accept() (net.Conn, error) {
	var b accept.Backoff
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			select {
			case <-l.done:
				return nil, err
			default:
			}
			l.tell(evAcceptFailed, sourceKey{}, err)
			t := time.NewTimer(b.Failed())
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		b.Accepted()
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

func (l *limitListener) tell(ev event, k sourceKey, err error) {
	if l.note != nil {
		l.note(ev, k, err)
	}
}

// admit applies the limits to c: it returns c wrapped, or nil after closing it.
func (l *limitListener) admit(c net.Conn) *limitConn {
	k := sourceOf(c.RemoteAddr()).key()
	l.mu.Lock()
	mine := len(l.conns[k])
	if mine >= l.perSource {
		l.mu.Unlock()
		c.Close()
		l.tell(evTCPRefused, k, nil)
		return nil
	}
	var victim *limitConn
	if l.n >= l.total {
		var big []*limitConn
		for _, cs := range l.conns {
			if len(cs) > len(big) {
				big = cs
			}
		}
		if len(big) <= mine+1 {
			l.mu.Unlock()
			c.Close()
			l.tell(evTCPRefused, k, nil)
			return nil
		}
		victim = big[0]
		for _, bc := range big[1:] {
			if bc.lastRead.Load() < victim.lastRead.Load() {
				victim = bc
			}
		}
		l.dropLocked(victim)
	}
	lc := &limitConn{Conn: c, l: l, key: k}
	lc.lastRead.Store(time.Now().UnixNano())
	l.conns[k] = append(l.conns[k], lc)
	l.n++
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
		l.tell(evTCPEvicted, victim.key, nil)
	}
	return lc
}

// dropLocked gives c's slot back, once. l.mu is held.
func (l *limitListener) dropLocked(c *limitConn) {
	if c.dropped {
		return
	}
	c.dropped = true
	cs := l.conns[c.key]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(l.conns, c.key)
	} else {
		l.conns[c.key] = cs
	}
	l.n--
}

// count returns the connections held open in all and by k (for tests and status).
func (l *limitListener) count(k sourceKey) (all, mine int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, len(l.conns[k])
}
