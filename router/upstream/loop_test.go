package upstream_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

// drive runs a Handshake the way an event loop does, with blocking reads of exactly what the
// next message needs in place of the loop's readiness: it returns the connection (nil on
// failure) and End's error.
func drive(t *testing.T, tr *upstream.Tracked, dst upstream.Addr, early string) (net.Conn, error) {
	t.Helper()
	var h upstream.Handshake
	proxy, ok := tr.Begin(&h, dst)
	if !ok {
		t.Fatalf("Begin: not a loop-driven upstream")
	}
	c, err := socks5test.LoopbackDial(context.Background(), "tcp", proxy.String())
	if err != nil {
		return nil, h.End(h.DialFailed(err))
	}
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	fail := func(cause error) (net.Conn, error) {
		c.Close()
		return nil, h.End(cause)
	}
	n := 0
	if h.Pipelined() {
		n = len(early)
	}
	out, err := h.Start(nil, n)
	if err != nil {
		return fail(err)
	}
	if _, err := c.Write(append(out, early[:n]...)); err != nil {
		return fail(h.WriteFailed(err))
	}
	var in []byte
	for !h.Done() {
		if need := h.Need(in); need > 0 {
			b := make([]byte, need)
			m, err := io.ReadFull(c, b)
			in = append(in, b[:m]...)
			if err != nil {
				return fail(h.Cut(in, err))
			}
			continue
		}
		m, next, err := h.Feed(in, nil)
		if err != nil {
			return fail(err)
		}
		in = in[m:]
		if len(next) > 0 {
			if _, err := c.Write(next); err != nil {
				return fail(h.WriteFailed(err))
			}
		}
	}
	if _, err := io.WriteString(c, early[n:]); err != nil {
		return fail(err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, h.End(nil)
}

func track(t *testing.T, u upstream.Upstream) *upstream.Tracked {
	t.Helper()
	tr, err := upstream.Track(u, upstream.HealthConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestHandshakeLikeConnect: the failures of TestSent, driven as a Handshake, are the errors
// Connect returns: the same text, Sent and Refused, and the same health.
func TestHandshakeLikeConnect(t *testing.T) {
	d := upstream.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 22}
	socksReq := 3 + 10
	tests := []struct {
		name     string
		pipeline bool
		early    string
		read     int
		answer   string
	}{
		{"reply-lost", true, "early", socksReq + 5, "\x05\x00"},
		{"reply-lost-no-early", true, "", socksReq, "\x05\x00"},
		{"greeting-lost", true, "early", socksReq + 5, ""},
		{"refused", true, "early", socksReq + 5, "\x05\x00\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"refused-cut", true, "early", socksReq + 5, "\x05\x00\x05\x04"},
		{"general-failure", false, "", 3, "\x05\x00\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00"},
		{"lockstep-reply-lost", false, "early", 3, "\x05\x00"},
		{"not-socks", true, "", socksReq, "HTTP/1.1 400 Bad Request\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := upstream.Config{Name: "p", Host: "127.0.0.1", Pipeline: tt.pipeline}
			cfg.Port = scriptedProxy(t, tt.read, tt.answer, false)
			viaConnect := track(t, newUpstream(t, cfg, upstream.Options{}))
			_, want := viaConnect.Connect(ctxTimeout(t), d, []byte(tt.early))
			cfg.Port = scriptedProxy(t, tt.read, tt.answer, false)
			viaLoop := track(t, newUpstream(t, cfg, upstream.Options{}))
			_, got := drive(t, viaLoop, d, tt.early)
			var gu, wu *upstream.Error
			if !errors.As(got, &gu) || !errors.As(want, &wu) {
				t.Fatalf("errors %v and %v, want *upstream.Error", got, want)
			}
			if closedText(got) != closedText(want) || gu.Sent != wu.Sent || gu.Refused != wu.Refused {
				t.Errorf("Handshake: %v (sent %v, refused %v)\nConnect:   %v (sent %v, refused %v)",
					got, gu.Sent, gu.Refused, want, wu.Sent, wu.Refused)
			}
			if g, w := viaLoop.Status().State, viaConnect.Status().State; g != w {
				t.Errorf("health %v after the handshake, %v after Connect", g, w)
			}
		})
	}
}

// TestHandshakeGoSocks5: through go-socks5, with and without credentials, pipelined or not:
// the tunnel carries the destination's banner and the early bytes, and the health is up
// with a latency; a wrong password is ErrAuthFailed and brings it down.
func TestHandshakeGoSocks5(t *testing.T) {
	target := startTarget(t)
	dst := upstream.Addr{IP: target.Addr(), Port: target.Port()}
	for _, creds := range []bool{false, true} {
		proxy, _ := startSOCKS(t, nil, creds)
		for _, pipeline := range []bool{false, true} {
			cfg := upstream.Config{Name: "p", Host: "127.0.0.1", Port: proxy.Port(), Pipeline: pipeline}
			if creds {
				cfg.Username, cfg.Password = proxyUser, proxyPass
			}
			tr := track(t, newUpstream(t, cfg, upstream.Options{}))
			c, err := drive(t, tr, dst, "early bytes\n")
			if err != nil {
				t.Fatalf("creds=%v pipeline=%v: %v", creds, pipeline, err)
			}
			expectBannerAndEcho(t, c, "early bytes\n")
			c.Close()
			if s := tr.Status(); s.State != upstream.Up || s.Latency <= 0 {
				t.Errorf("creds=%v pipeline=%v: status %+v, want up with a latency", creds, pipeline, s)
			}
		}
	}
	proxy, _ := startSOCKS(t, nil, true)
	tr := track(t, newUpstream(t, upstream.Config{Name: "p", Host: "127.0.0.1", Port: proxy.Port(),
		Username: proxyUser, Password: "wrong-" + proxyPass, Pipeline: true}, upstream.Options{}))
	_, err := drive(t, tr, dst, "x")
	if !errors.Is(err, socks5.ErrAuthFailed) {
		t.Errorf("wrong password: %v, want ErrAuthFailed", err)
	}
	if s := tr.Status(); s.State != upstream.Down {
		t.Errorf("wrong password: state %v, want down", s.State)
	}
}

// TestBegin: only a SOCKS5 upstream whose address is known without a lookup is driven by its
// caller; a named proxy is, once Connect looked it up and one address is remembered, and no
// longer once a dial to it failed.
func TestBegin(t *testing.T) {
	dst := upstream.Addr{Name: "example.com", Port: 80}
	var h upstream.Handshake
	httpUp := track(t, newUpstream(t, upstream.Config{Name: "w", Type: upstream.HTTP, Host: "127.0.0.1", Port: 3128}, upstream.Options{}))
	if _, ok := httpUp.Begin(&h, dst); ok {
		t.Error("Begin on an HTTP upstream: ok")
	}
	target := startTarget(t)
	proxy, stop := startSOCKS(t, nil, false)
	resolve := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	named := track(t, newUpstream(t, upstream.Config{Name: "n", Host: "localhost", Port: proxy.Port()}, upstream.Options{Resolve: resolve}))
	if _, ok := named.Begin(&h, dst); ok {
		t.Error("Begin on a name never looked up: ok")
	}
	c, err := named.Connect(ctxTimeout(t), upstream.Addr{IP: target.Addr(), Port: target.Port()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	got, ok := named.Begin(&h, dst)
	if !ok || got != proxy {
		t.Fatalf("Begin after a lookup = %v, %v; want %v", got, ok, proxy)
	}
	h.Abandon()
	stop()
	if _, err := drive(t, named, dst, ""); err == nil {
		t.Fatal("handshake to a stopped proxy succeeded")
	}
	if _, ok := named.Begin(&h, dst); ok {
		t.Error("Begin after a failed dial: ok, want the name looked up again")
	}
}

// TestHandshakeExpiredAndAbandoned: a handshake that ran out of time wraps
// context.DeadlineExceeded and counts against the upstream; one abandoned counts for
// nothing and releases the trial after a backoff.
func TestHandshakeExpiredAndAbandoned(t *testing.T) {
	u := newUpstream(t, upstream.Config{Name: "p", Host: "127.0.0.1", Port: 9}, upstream.Options{})
	tr := track(t, u)
	var h upstream.Handshake
	if _, ok := tr.Begin(&h, upstream.Addr{Name: "example.com", Port: 80}); !ok {
		t.Fatal("Begin: not ok")
	}
	h.Abandon()
	if s := tr.Status(); s.State != upstream.Unknown {
		t.Errorf("after Abandon: %v, want unknown", s.State)
	}
	if _, ok := tr.Begin(&h, upstream.Addr{Name: "example.com", Port: 80}); !ok {
		t.Fatal("Begin: not ok")
	}
	err := h.End(h.Expired(false, nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Expired: %v, want context.DeadlineExceeded", err)
	}
	if s := tr.Status(); s.State != upstream.Down {
		t.Errorf("after a timeout: %v, want down", s.State)
	}
	if again := h.End(nil); again != nil || tr.Status().State != upstream.Down {
		t.Errorf("a second End counted: %v, %v", again, tr.Status().State)
	}
}

// closedText is err's text, with the way a proxy that hangs up was seen (EOF, or a reset
// when it closed with the request unread: a race of the kernel, not of the code) made one.
func closedText(err error) string {
	s := err.Error()
	for _, seen := range []string{"read: connection reset by peer", "unexpected EOF", "EOF"} {
		if strings.HasSuffix(s, seen) {
			s = strings.TrimSuffix(s, seen)
			// A reset names the socket ("read tcp A->B: "), each run its own ports.
			if i := strings.LastIndex(s, "read tcp "); i >= 0 && strings.HasSuffix(s, ": ") && strings.Contains(s[i:], "->") {
				s = s[:i]
			}
			return s + "(closed)"
		}
	}
	return s
}
