package router

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/internal/modeltest"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/refusal"
)

// startForward serves f (its Listen on 127.0.0.1:0) to srv and returns its address.
func startForward(t *testing.T, e *env, f Forward, srv *modeltest.Server) string {
	t.Helper()
	api, err := modelapi.New(modelapi.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Listen, f.Connect, f.API = netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort(srv.Addr()), api
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ln, err := e.r.ListenForward(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	go e.r.ServeForward(ctx, ln, func() *Forward { return &f })
	return ln.Addr().String()
}

// dialFrom connects to addr from the local address from.
func dialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: waitFor}
	return d.Dial("tcp", addr)
}

// TestForwardSharesPerGuest: one guest with two addresses opens, from each, as many idle
// connections to its forward as the forwards' whole budget; a second guest, on its own network and
// forward, still gets its call through. (Keyed by source address, the first guest's two
// addresses took every slot and the second guest was reset.)
func TestForwardSharesPerGuest(t *testing.T) {
	srv, err := modeltest.Start(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	e := newEnv(t, Settings{}, Options{})
	first := startForward(t, e, Forward{Name: "first", Allow: []netip.Prefix{netip.MustParsePrefix("127.0.1.0/24")}}, srv)
	second := startForward(t, e, Forward{Name: "second", Allow: []netip.Prefix{netip.MustParsePrefix("127.0.2.0/24")}}, srv)
	budget := e.r.Budgets().ForwardBudget
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	// Its first address alone, then its second: what one address could not take, the
	// other took (the attack as it was seen).
	for i, from := range []string{"127.0.1.1", "127.0.1.2"} {
		for range budget {
			c, err := dialFrom(from, first)
			if err != nil {
				continue // refused at once
			}
			conns = append(conns, c)
		}
		_ = wait.Poll(waitFor, func() bool { // the accepts
			return e.r.Budgets().Forwards+int(e.r.book.Count(refusal.Limit)) >= (i+1)*budget
		})
	}
	held := e.r.Budgets().Forwards
	c, err := dialFrom("127.0.2.1", second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitFor))
	io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: model\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the second guest's forward: %v, %v; want 200 while the first guest holds its share idle", resp, err)
	}
	if held >= budget {
		t.Errorf("the first guest holds %d of the forwards' %d slots; want its share", held, budget)
	}
	t.Logf("forwards' budget %d: one guest of 2 addresses holds %d idle; another guest's forward answered", budget, held)
}

// TestForwardIdleTimeout: a forward's idle connection is closed after its idle_timeout,
// and its slot given back.
func TestForwardIdleTimeout(t *testing.T) {
	srv, err := modeltest.Start(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	e := newEnv(t, Settings{IdleTimeout: time.Hour}, Options{})
	const idle = 200 * time.Millisecond
	addr := startForward(t, e, Forward{Name: "model", Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, IdleTimeout: idle}, srv)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One call, then nothing: the timeout runs between requests.
	c.SetDeadline(time.Now().Add(waitFor))
	io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: model\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a call: %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	_, err = br.ReadByte()
	waited := time.Since(start)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection: %v; want it closed by the forward (EOF)", err)
	}
	if waited < idle-idle/10 {
		t.Errorf("closed after %v; want its idle_timeout, %v", waited, idle)
	}
	_ = wait.Poll(waitFor, func() bool { return e.r.Budgets().Forwards == 0 })
	if n := e.r.Budgets().Forwards; n != 0 {
		t.Errorf("%d forward slots held after the connection closed", n)
	}
}
