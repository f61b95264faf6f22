package modelfwd

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/internal/syncbuf"
	"github.com/agentcage/router/internal/tally"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules/refusal"
)

// waitFor bounds every wait of these tests on a peer that should have acted.
const waitFor = 5 * time.Second

// env is a Server with its refusals and log in reach, and the listeners that hand it
// connections as the router would (serve).
type env struct {
	t     *testing.T
	r     *Server
	logs  *syncbuf.Buffer
	log   *slog.Logger
	idle  time.Duration
	conns sync.WaitGroup
}

// newEnv returns an env whose connections idle out after idle (0: a minute, as the
// router's tests' default).
func newEnv(t *testing.T, idle time.Duration) *env {
	t.Helper()
	if idle == 0 {
		idle = time.Minute
	}
	e := &env{t: t, logs: &syncbuf.Buffer{}, idle: idle}
	e.log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	summary := tally.New(e.log, time.Minute, tally.Options{Message: "refused (summary)", Unit: "requests", PerKind: 5})
	var d net.Dialer
	e.r = New(Config{
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return d.DialContext(ctx, network, addr)
		},
		Refusals: new(refusal.Book),
		Note:     func(reason, who string) bool { return summary.Add(reason, who, nil) },
		Canaries: new(tally.Once),
	})
	t.Cleanup(func() {
		e.conns.Wait()
		summary.Flush()
		e.r.Close()
		if t.Failed() {
			t.Logf("log:\n%s", e.logs.String())
		}
	})
	return e
}

// serve listens on f.Listen and serves every connection to the HTTP forward f until the
// test ends; it returns the listener.
func (e *env) serve(f Forward) net.Listener {
	e.t.Helper()
	ln, err := net.Listen("tcp", f.Listen.String())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(func() {
		cancel()
		ln.Close()
	})
	e.conns.Add(1)
	go func() {
		defer e.conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var up, down atomic.Int64
			e.conns.Add(1)
			go func() {
				defer e.conns.Done()
				e.r.Serve(ctx, &f, Conn{C: c.(*net.TCPConn), Src: netaddr.AddrPort(c.RemoteAddr()), Up: &up, Down: &down,
					Idle: e.idle, Log: e.log.With("forward", f.Name)})
			}()
		}
	}()
	return ln
}

// within receives from ch and fails the test unless a value (or ch's close) comes within d;
// what says what is waited for.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	var v T
	select {
	case v = <-ch:
	case <-time.After(d):
		t.Fatalf("waited %v for %s", d, what)
	}
	return v
}

// waitLog waits (bounded) until the log holds want.
func (e *env) waitLog(want string) {
	e.t.Helper()
	wait.For(e.t, "the log to say "+want, waitFor, func() bool { return strings.Contains(e.logs.String(), want) })
}
