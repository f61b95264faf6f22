package control

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

type fakeHandler struct{}

func (fakeHandler) Status() Status {
	return Status{Config: "router.toml", Rules: []RuleStat{{Index: 1, Name: "vm", Action: "proxy", Proxy: "exit", Hits: 3}},
		Flows: []FlowStat{{ID: 7, Src: "10.0.2.15:40000", Dst: "198.18.0.1:443", Host: "api.example.com", Rule: "vm", Action: "proxy", Age: time.Second}}}
}

func (fakeHandler) NameFor(a netip.Addr) (string, bool, bool) {
	if a == netip.MustParseAddr("198.18.0.1") {
		return "api.example.com", true, true
	}
	return "", netip.MustParsePrefix("198.18.0.0/15").Contains(a), false
}

func TestRoundTrip(t *testing.T) {
	srv, cli := net.Pipe()
	go serveConn(srv, fakeHandler{}, nil)
	c := &Client{c: cli}
	c.sc = newScanner(cli)
	defer c.Close()
	r, err := c.Do(Request{Op: "name", Addr: netip.MustParseAddr("198.18.0.1")})
	if err != nil || r.Name != "api.example.com" || !r.Fake {
		t.Fatalf("name: %+v, %v", r, err)
	}
	r, err = c.Do(Request{Op: "name", Addr: netip.MustParseAddr("198.18.0.9")})
	if err == nil || !r.Fake {
		t.Fatalf("unknown pool address: %+v, %v", r, err)
	}
	r, err = c.Do(Request{Op: "status"})
	if err != nil || r.Status == nil || r.Status.Rules[0].Hits != 3 || r.Status.Flows[0].Host != "api.example.com" {
		t.Fatalf("status: %+v, %v", r, err)
	}
	if _, err := c.Do(Request{Op: "reboot"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("unknown op: %v", err)
	}
}

// flakyListener fails its first accepts with EMFILE, as a listener does while the process is
// out of descriptors, then hands out the connections of conns.
type flakyListener struct {
	fails int
	conns chan net.Conn
	done  chan struct{}
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *flakyListener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *flakyListener) Addr() net.Addr { return &net.UnixAddr{Name: "flaky", Net: "unix"} }

// TestServeSurvivesAcceptErrors: running out of descriptors pauses the control channel,
// it does not end it.
func TestServeSurvivesAcceptErrors(t *testing.T) {
	ln := &flakyListener{fails: 6, conns: make(chan net.Conn), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, fakeHandler{}, nil) }()
	srv, cli := net.Pipe()
	select {
	case ln.conns <- srv:
	case err := <-done:
		t.Fatalf("Serve ended after accept errors: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not accept again within 5 s")
	}
	c := &Client{c: cli, sc: newScanner(cli)}
	if r, err := c.Do(Request{Op: "status"}); err != nil || r.Status.Config != "router.toml" {
		t.Errorf("status after accept errors: %+v, %v", r, err)
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil after cancel", err)
	}
}
