package daemon

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/agentcage/router/router"
)

// served is a socket the daemon serves itself (a forward's or an inbound's) and its
// serving goroutine. Its settings, cfg, read anew for each connection, are swapped on a
// reload that keeps the listen address, without closing the socket.
type served[T any] struct {
	cfg    atomic.Pointer[T]
	ln     *net.TCPListener
	cancel context.CancelFunc // nil until it serves
}

type (
	forwardRun = served[router.Forward]
	inboundRun = served[router.Inbound]
)

// openServed opens cfg's socket with listen; connections wait in its backlog until run.
func openServed[T any](ctx context.Context, cfg T, listen func(context.Context, T) (*net.TCPListener, error)) (*served[T], error) {
	ln, err := listen(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &served[T]{ln: ln}
	s.cfg.Store(&cfg)
	return s, nil
}

// run serves s with serve, on d.serving, until stop; a failure is logged as what (with
// the name that name reads from the settings).
func (s *served[T]) run(d *daemon, serve func(context.Context, *net.TCPListener, func() *T) error, what string, name func(*T) string) {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	d.serving.Go(func() {
		if err := serve(ctx, s.ln, s.cfg.Load); err != nil {
			d.log.Error(what, "name", name(s.cfg.Load()), "err", err)
		}
	})
}

// stop ends s's serving, if it serves, and closes its socket.
func (s *served[T]) stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.ln.Close()
}
