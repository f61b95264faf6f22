// Package upstreamtest holds fakes of package upstream's interfaces, for
// tests of the code that sends flows through upstreams: an Upstream whose
// answers are functions, and an in-memory Association. Imported by tests
// only.
package upstreamtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/agentcage/router/router/upstream"
)

// Fake is an Upstream whose Connect and Associate call the given
// functions. A nil function fails the call with an *upstream.Error that
// counts against the upstream. Its fields must not change once it is in
// use; its methods are safe for concurrent use.
type Fake struct {
	ID            string // returned by Name
	ConnectFunc   func(ctx context.Context, dst upstream.Addr, early []byte) (net.Conn, error)
	AssociateFunc func(ctx context.Context) (upstream.Association, error)

	connects   atomic.Int64
	associates atomic.Int64
}

// Name returns f.ID.
func (f *Fake) Name() string { return f.ID }

// Connect counts the call and returns ConnectFunc's answer.
func (f *Fake) Connect(ctx context.Context, dst upstream.Addr, early []byte) (net.Conn, error) {
	f.connects.Add(1)
	if f.ConnectFunc == nil {
		return nil, Failure(f.ID, false)
	}
	return f.ConnectFunc(ctx, dst, early)
}

// Associate counts the call and returns AssociateFunc's answer.
func (f *Fake) Associate(ctx context.Context) (upstream.Association, error) {
	f.associates.Add(1)
	if f.AssociateFunc == nil {
		return nil, &upstream.Error{Upstream: f.ID, Op: "associate", Err: errors.New("fake: no association")}
	}
	return f.AssociateFunc(ctx)
}

// Connects returns how many times Connect was called.
func (f *Fake) Connects() int { return int(f.connects.Load()) }

// Associates returns how many times Associate was called.
func (f *Fake) Associates() int { return int(f.associates.Load()) }

// Failure returns the error of a failed connect through upstream name: a
// failure of the proxy, or, with refused, the proxy's refusal of the
// destination.
func Failure(name string, refused bool) error {
	cause := errors.New("fake: proxy down")
	if refused {
		cause = errors.New("fake: destination refused")
	}
	return &upstream.Error{Upstream: name, Op: "connect", Refused: refused, Err: cause}
}

// Datagram is one datagram through a fake association: its payload, and
// its destination (sent) or source (delivered).
type Datagram struct {
	Addr    upstream.Addr
	Payload []byte
}

// Association is an in-memory upstream.Association. What the code under
// test sends appears on Sent; what the test delivers with Deliver is read
// by ReadFrom. Lose ends it as a dead control connection would, Close as
// its owner does.
type Association struct {
	// Sent receives every datagram WriteTo sends (a copy); it holds 256,
	// after which WriteTo blocks until the test reads or the association
	// ends.
	Sent chan Datagram

	in   chan Datagram
	done chan struct{}
	werr chan error // WriteErr's errors, one per WriteTo
	once sync.Once
	mu   sync.Mutex // guards err
	err  error
}

// NewAssociation returns a live association.
func NewAssociation() *Association {
	return &Association{Sent: make(chan Datagram, 256), in: make(chan Datagram, 256), done: make(chan struct{}), werr: make(chan error, 16)}
}

// Deliver makes ReadFrom return p from src; it blocks when 256 datagrams
// wait unread, and drops p once the association ended.
func (a *Association) Deliver(src upstream.Addr, p []byte) {
	select {
	case a.in <- Datagram{src, append([]byte(nil), p...)}:
	case <-a.done:
	}
}

// Lose ends the association with an error wrapping
// upstream.ErrAssociationLost and cause.
func (a *Association) Lose(cause error) {
	a.end(fmt.Errorf("fake: %w: %w", upstream.ErrAssociationLost, cause))
}

func (a *Association) end(err error) {
	a.once.Do(func() {
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
		close(a.done)
	})
}

// WriteErr makes the next WriteTo fail with err (and send nothing), as a
// datagram too large for the relay's socket would; up to 16 wait.
func (a *Association) WriteErr(err error) { a.werr <- err }

// WriteTo sends a copy of p to Sent, or fails with what WriteErr gave.
func (a *Association) WriteTo(p []byte, dst upstream.Addr) (int, error) {
	if err := a.Err(); err != nil {
		return 0, err
	}
	select {
	case err := <-a.werr:
		return 0, err
	default:
	}
	select {
	case a.Sent <- Datagram{dst, append([]byte(nil), p...)}:
		return len(p), nil
	case <-a.done:
		return 0, a.Err()
	}
}

// ReadFrom returns the next delivered datagram; one longer than p is
// dropped with an error wrapping upstream.ErrTooLarge, as the real one does.
func (a *Association) ReadFrom(p []byte) (int, upstream.Addr, error) {
	select {
	case d := <-a.in:
		if len(d.Payload) > len(p) {
			return len(d.Payload), d.Addr, fmt.Errorf("fake: %d bytes: %w", len(d.Payload), upstream.ErrTooLarge)
		}
		return copy(p, d.Payload), d.Addr, nil
	case <-a.done:
		return 0, upstream.Addr{}, a.Err()
	}
}

// Done is closed when the association ended.
func (a *Association) Done() <-chan struct{} { return a.done }

// Err says why it ended, nil while it lives.
func (a *Association) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Close ends it with an error wrapping net.ErrClosed.
func (a *Association) Close() error {
	a.end(fmt.Errorf("fake association: %w", net.ErrClosed))
	return nil
}
