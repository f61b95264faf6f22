// Package accept is the one way the router's listeners survive accept errors: an accept
// that fails for any reason but a closed listener (out of descriptors, a connection aborted
// before it was accepted) pauses accepting, from MinPause doubling up to MaxPause, and never
// ends the loop, so that a listener outlives a descriptor flood. The transparent listener,
// the forwards, the inbounds, the control channel and the DNS server's TCP listener all use
// it; the Linux event loop, which accepts without a goroutine, uses Backoff alone.
package accept

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// The bounds of the pause after an accept error.
const (
	MinPause = 5 * time.Millisecond
	MaxPause = time.Second
)

// Backoff is the pause after consecutive accept errors. The zero Backoff is ready; it is
// not safe for concurrent use.
type Backoff struct{ pause time.Duration }

// Failed returns the pause after one more failed accept: MinPause, then twice the last, up
// to MaxPause.
func (b *Backoff) Failed() time.Duration {
	b.pause = min(max(2*b.pause, MinPause), MaxPause)
	return b.pause
}

// Accepted starts the next run of errors from MinPause again.
func (b *Backoff) Accepted() { b.pause = 0 }

// Loop calls accept until ctx is done or the listener ln is closed, and serve with each
// connection it returns (serve must not block for long: start a goroutine for the work).
// It closes ln when ctx is done. An accept error is told to failed with the pause that
// follows it (failed may be nil), then retried after that pause. Loop returns nil: when ctx
// is done or ln closed, and never for an accept error.
func Loop[C any](ctx context.Context, ln io.Closer, accept func() (C, error), failed func(err error, pause time.Duration), serve func(C)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var b Backoff
	for {
		c, err := accept()
		if err == nil {
			b.Accepted()
			serve(c)
			continue
		}
		if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
			return nil
		}
		pause := b.Failed()
		if failed != nil {
			failed(err, pause)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}
