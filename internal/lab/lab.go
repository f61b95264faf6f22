package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Options tune a Lab. The zero value is a complete lab.
type Options struct {
	// Logf hears progress (setup steps, teardown, cleanup of stale labs); nil discards. It is
	// called only from New, Close and Cleanup on the caller's goroutine, never from server
	// goroutines, so testing.T.Logf fits.
	Logf func(format string, args ...any)
	// SocksUser, when not empty, makes go-socks5 demand RFC 1929 user/password
	// authentication with SocksPassword. Dante never asks.
	SocksUser, SocksPassword string
	// ModelGap is the pause after each streamed event of the model server (default 50 ms);
	// ModelEvents the number of content events per stream (default 5).
	ModelGap    time.Duration
	ModelEvents int
	// RunTimeout bounds each setup command and each Netns.Run (default 30 s).
	RunTimeout time.Duration
	// Names are more names the lab DNS answers, each with one IPv4 address (A; other types
	// NODATA), outside the lab.test zone too: a test's own names (allowed.test).
	Names map[string]netip.Addr
	// EchoTLS serves the IP echo over HTTPS on ServiceAddr:443 too (EchoTLSURL, its CA in
	// EchoCAPEM); off, the port is free for a test's own TLS server there.
	EchoTLS bool
}

// Lab is a running lab. Its methods are safe for concurrent use. Close ends it; afterwards the
// namespaces are gone, the accessors of the logs keep returning what was recorded, and the
// methods that touch the namespaces return errors.
type Lab struct {
	id         string
	logf       func(format string, args ...any)
	runTimeout time.Duration

	inet, host, guest *Netns

	httpLog   record[HTTPRequest]
	dnsLog    record[DNSQuery]
	udpLog    record[UDPPacket]
	modelLog  record[ModelStream]
	modelReqs record[HTTPRequest] // every request the model server received
	socksLog  record[string]      // go-socks5 errors, accept errors

	echoCA []byte // the HTTPS echo's CA (PEM), set once by New

	dante *Process // set once by New
	state stateDir // the router's state directory, see StateDir

	mu     sync.Mutex     // guards undo and closed
	undo   []func() error // teardown steps, run last to first
	closed bool
}

// New builds a lab: namespaces, links, addresses, routes, sysctls, nftables, and the servers
// listed in the package comment. It first removes stale labs (see Cleanup). It needs root and
// the tools ip, nft and danted. ctx bounds the setup only; the lab lives until Close. If any
// step fails, New tears down what it built and returns the error.
func New(ctx context.Context, opts Options) (*Lab, error) {
	if !supported {
		return nil, errors.New("lab: network namespaces need linux")
	}
	if !isRoot() {
		return nil, errors.New("lab: needs root (network namespaces, nftables)")
	}
	for _, tool := range []string{"ip", "nft", "danted"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("lab: %s not found (Debian: apt-get install iproute2 nftables dante-server): %w", tool, err)
		}
	}
	l := &Lab{
		id:         fmt.Sprintf("rl%d-%04x", os.Getpid(), rand.N(0x10000)),
		logf:       opts.Logf,
		runTimeout: opts.RunTimeout,
	}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}
	if l.runTimeout <= 0 {
		l.runTimeout = 30 * time.Second
	}
	if opts.ModelGap <= 0 {
		opts.ModelGap = 50 * time.Millisecond
	}
	if opts.ModelEvents <= 0 {
		opts.ModelEvents = 5
	}
	if err := Cleanup(ctx, l.logf); err != nil {
		l.logf("lab: cleanup of stale labs: %v", err)
	}
	start := time.Now()
	if err := l.build(ctx, opts); err != nil {
		l.logf("lab %s: setup failed: %v", l.id, err)
		return nil, errors.Join(fmt.Errorf("lab setup: %w", err), l.Close())
	}
	l.logf("lab %s: up in %v", l.id, time.Since(start).Round(time.Millisecond))
	return l, nil
}

func (l *Lab) build(ctx context.Context, opts Options) error {
	if err := l.buildNetwork(ctx); err != nil {
		return err
	}
	if err := l.startInetServers(ctx, opts); err != nil {
		return err
	}
	if err := l.startDante(ctx); err != nil {
		return err
	}
	return l.startModel(ctx, modelConfig{gap: opts.ModelGap, events: opts.ModelEvents})
}

// addUndo registers a teardown step.
func (l *Lab) addUndo(f func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.undo = append(l.undo, f)
}

func (l *Lab) run(ctx context.Context, stdin string, name string, args ...string) error {
	_, err := runCmd(ctx, l.runTimeout, stdin, name, args...)
	return err
}

// Close tears the lab down: servers, danted (and its children), whatever else still runs in
// the namespaces (SIGKILL by PID), the namespaces, /etc/netns/<name> and the temporary files.
// It returns every error met and carries on past each. A second Close does nothing and returns
// nil.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	undo := l.undo
	l.undo = nil
	l.mu.Unlock()
	start := time.Now()
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	l.logf("lab %s: closed in %v", l.id, time.Since(start).Round(time.Millisecond))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab close: %w", err)
	}
	return nil
}

// ID is the lab's name prefix, e.g. "rl4242-0f3a"; the namespaces are ID()+"-inet" etc.
func (l *Lab) ID() string { return l.id }

// Inet is the internet namespace (servers, proxies, leak counter).
func (l *Lab) Inet() *Netns { return l.inet }

// Host is the hypervisor host namespace (NAT, model server; the router runs here).
func (l *Lab) Host() *Netns { return l.host }

// Guest is the VM namespace.
func (l *Lab) Guest() *Netns { return l.guest }
