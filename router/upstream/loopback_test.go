package upstream_test

// Loopback integration: SOCKS5 upstreams against github.com/things-go/go-socks5
// (TCP and UDP ASSOCIATE), HTTP and HTTPS upstreams against
// httpconnecttest's proxy, all on 127.0.0.1:0, with targets that write a
// banner on accept and echo (TCP) or answer "echo:" + the datagram (UDP).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/httpconnect"
	"github.com/agentcage/router/router/upstream/httpconnect/httpconnecttest"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

const (
	banner    = "SSH-2.0-OpenSSH_9.6\r\n"
	proxyUser = "agent"
	proxyPass = "loopback-Secret-42"
	ioTimeout = 10 * time.Second
)

// countingDial is the upstream's injected dialer: loopback only, and it
// counts what it dials by network.
type countingDial struct{ tcp, udp atomic.Int64 }

func (c *countingDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp":
		c.tcp.Add(1)
	case "udp":
		c.udp.Add(1)
	}
	return socks5test.LoopbackDial(ctx, network, addr)
}

func startTarget(t *testing.T) netip.AddrPort {
	t.Helper()
	return echotest.Banner(t, banner, ioTimeout)
}

func startUDPEcho(t *testing.T) netip.AddrPort {
	t.Helper()
	return echotest.UDP(t, "echo:")
}

// startSOCKS runs go-socks5 (socks5test) on ln (127.0.0.1:0 when nil), with
// credentials when creds is true; it stops at cleanup or when stop is called.
func startSOCKS(t *testing.T, ln net.Listener, creds bool) (addr netip.AddrPort, stop func()) {
	t.Helper()
	o := socks5test.Options{Listener: ln}
	if creds {
		o.Credentials = map[string]string{proxyUser: proxyPass}
	}
	s := socks5test.Start(t, o)
	return s.Addr, s.Stop
}

func newUpstream(t *testing.T, cfg upstream.Config, opts upstream.Options) upstream.Upstream {
	t.Helper()
	if opts.Dial == nil {
		opts.Dial = socks5test.LoopbackDial
	}
	u, err := upstream.New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return u
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	t.Cleanup(cancel)
	return ctx
}

// expectBannerAndEcho reads the banner, then the echo of early, then checks
// a ping.
func expectBannerAndEcho(t *testing.T, c net.Conn, early string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	got := make([]byte, len(banner)+len(early))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != banner+early {
		t.Fatalf("read %q, %v; want the banner and %q", got, err, early)
	}
	const ping = "ping 1234567890\n"
	if _, err := io.WriteString(c, ping); err != nil {
		t.Fatalf("write: %v", err)
	}
	echo := make([]byte, len(ping))
	if _, err := io.ReadFull(c, echo); err != nil || string(echo) != ping {
		t.Fatalf("echo %q, %v", echo, err)
	}
}

func TestSOCKS5Connect(t *testing.T) {
	target := startTarget(t)
	noauth, _ := startSOCKS(t, nil, false)
	userpass, _ := startSOCKS(t, nil, true)
	for _, withAuth := range []bool{false, true} {
		for _, pipeline := range []bool{false, true} {
			for _, d := range []upstream.Addr{{IP: target.Addr(), Port: target.Port()}, {Name: "localhost", Port: target.Port()}} {
				name := fmt.Sprintf("auth=%v/pipeline=%v/%s", withAuth, pipeline, d)
				t.Run(name, func(t *testing.T) {
					cfg := upstream.Config{Name: "exit", Host: "127.0.0.1", Port: noauth.Port(), Pipeline: pipeline}
					if withAuth {
						cfg.Port, cfg.Username, cfg.Password = userpass.Port(), proxyUser, proxyPass
					}
					var cd countingDial
					u := newUpstream(t, cfg, upstream.Options{Dial: cd.dial})
					for _, early := range []string{"", "early bytes\n"} {
						c, err := u.Connect(ctxTimeout(t), d, []byte(early))
						if err != nil {
							t.Fatalf("Connect: %v", err)
						}
						if _, ok := c.(*net.TCPConn); !ok {
							t.Errorf("Connect returned %T, want *net.TCPConn", c)
						}
						expectBannerAndEcho(t, c, early)
						c.Close()
					}
					if cd.tcp.Load() != 2 {
						t.Errorf("%d TCP dials through the injected dialer, want 2", cd.tcp.Load())
					}
				})
			}
		}
	}
}

func TestSOCKS5ConnectFailures(t *testing.T) {
	target := startTarget(t)
	noauth, _ := startSOCKS(t, nil, false)
	userpass, _ := startSOCKS(t, nil, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	tests := []struct {
		name        string
		cfg         upstream.Config
		dst         upstream.Addr
		wantIs      error
		wantRefused bool
		wantMsg     string
	}{
		{"wrong-password", upstream.Config{Name: "exit", Host: "127.0.0.1", Port: userpass.Port(), Username: proxyUser, Password: "wrong-Secret"},
			upstream.Addr{IP: target.Addr(), Port: target.Port()}, socks5.ErrAuthFailed, false, `socks5 auth: credentials rejected for user "agent"`},
		{"no-credentials", upstream.Config{Name: "exit", Host: "127.0.0.1", Port: userpass.Port()},
			upstream.Addr{IP: target.Addr(), Port: target.Port()}, socks5.ErrNoAcceptableMethods, false, "no acceptable authentication methods"},
		{"proxy-down", upstream.Config{Name: "exit", Host: "127.0.0.1", Port: closed.Port()},
			upstream.Addr{IP: target.Addr(), Port: target.Port()}, nil, false, "dial proxy 127.0.0.1:" + fmt.Sprint(closed.Port())},
		{"target-refused", upstream.Config{Name: "exit", Host: "127.0.0.1", Port: noauth.Port()},
			upstream.Addr{IP: closed.Addr(), Port: closed.Port()}, nil, true, "connection refused (reply 0x05)"},
	}
	for _, tt := range tests {
		for _, pipeline := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pipeline=%v", tt.name, pipeline), func(t *testing.T) {
				tt.cfg.Pipeline = pipeline
				u, err := upstream.Track(newUpstream(t, tt.cfg, upstream.Options{}), upstream.HealthConfig{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				c, err := u.Connect(ctxTimeout(t), tt.dst, []byte("early"))
				if err == nil {
					c.Close()
					t.Fatal("Connect succeeded, want an error (fail closed)")
				}
				var ue *upstream.Error
				if !errors.As(err, &ue) || ue.Upstream != "exit" || ue.Refused != tt.wantRefused || ue.Sent {
					t.Errorf("error %#v, want an *upstream.Error with Refused=%v, Sent=false", err, tt.wantRefused)
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
				}
				if !strings.Contains(err.Error(), tt.wantMsg) || !strings.HasPrefix(err.Error(), "upstream exit: connect ") {
					t.Errorf("error %q, want it to contain %q", err, tt.wantMsg)
				}
				if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), proxyPass) {
					t.Errorf("error shows the password")
				}
				wantState := map[bool]upstream.State{false: upstream.Down, true: upstream.Up}[tt.wantRefused]
				if s := u.Status(); s.State != wantState || strings.Contains(fmt.Sprintf("%+v", s), "Secret") {
					t.Errorf("status %+v, want %v and no password", s, wantState)
				}
			})
		}
	}
}

// TestProxyHostName: a proxy given by name is looked up through the
// injected resolver, remembered until no address connects, and looked up
// again after; a failed lookup is not remembered.
func TestProxyHostName(t *testing.T) {
	target := startTarget(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy, stop := startSOCKS(t, ln, false)
	var lookups atomic.Int64
	var failLookup atomic.Bool
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		lookups.Add(1)
		if host != "proxy.test" {
			t.Errorf("lookup of %q", host)
		}
		if failLookup.Load() {
			return nil, errors.New("no such host")
		}
		return []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.1")}, nil
	}
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "proxy.test", Port: proxy.Port()}, upstream.Options{Resolve: resolve})
	d := upstream.Addr{IP: target.Addr(), Port: target.Port()}
	connect := func() error {
		c, err := u.Connect(ctxTimeout(t), d, nil)
		if err == nil {
			c.Close()
		}
		return err
	}
	for range 3 {
		if err := connect(); err != nil {
			t.Fatalf("Connect: %v", err)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups for 3 flows, want 1 (remembered)", n)
	}
	stop()
	if err := connect(); err == nil || !strings.Contains(err.Error(), "dial proxy proxy.test:") {
		t.Errorf("proxy stopped: %v", err)
	}
	failLookup.Store(true)
	if err := connect(); err == nil || !strings.Contains(err.Error(), "resolve proxy host proxy.test: no such host") {
		t.Errorf("lookup failing: %v", err)
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d lookups, want 2 (the addresses were forgotten when none connected)", n)
	}
	failLookup.Store(false)
	ln2, err := net.Listen("tcp", proxy.String())
	if err != nil {
		t.Fatalf("listen again on %v: %v", proxy, err)
	}
	startSOCKS(t, ln2, false)
	if err := connect(); err != nil {
		t.Errorf("proxy back: %v", err)
	}
	if n := lookups.Load(); n != 3 {
		t.Errorf("%d lookups, want 3 (a failed lookup is not remembered)", n)
	}
}

func TestHTTPConnect(t *testing.T) {
	target := startTarget(t)
	serverTLS, caPEM := httpconnecttest.TLS(t)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, typ := range []upstream.Type{upstream.HTTP, upstream.HTTPS} {
		for _, withAuth := range []bool{false, true} {
			opts := httpconnecttest.Options{}
			cfg := upstream.Config{Name: "web", Type: typ, Host: "127.0.0.1"}
			if withAuth {
				opts.Username, opts.Password = proxyUser, proxyPass
				cfg.Username, cfg.Password = proxyUser, proxyPass
			}
			if typ == upstream.HTTPS {
				opts.TLS = serverTLS
				cfg.RootCAs = roots
			}
			p := httpconnecttest.Start(t, opts)
			cfg.Port = p.Addr.Port()
			for _, pipeline := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/auth=%v/pipeline=%v", typ, withAuth, pipeline), func(t *testing.T) {
					cfg.Pipeline = pipeline
					u := newUpstream(t, cfg, upstream.Options{})
					for _, d := range []upstream.Addr{{IP: target.Addr(), Port: target.Port()}, {Name: "localhost", Port: target.Port()}} {
						for _, early := range []string{"", "early bytes\n"} {
							c, err := u.Connect(ctxTimeout(t), d, []byte(early))
							if err != nil {
								t.Fatalf("Connect %v: %v", d, err)
							}
							switch c.(type) {
							case *net.TCPConn:
								if typ != upstream.HTTP {
									t.Errorf("%s upstream returned %T", typ, c)
								}
							case *tls.Conn:
								if typ != upstream.HTTPS {
									t.Errorf("%s upstream returned %T", typ, c)
								}
							default:
								t.Errorf("Connect returned %T", c)
							}
							expectBannerAndEcho(t, c, early)
							c.Close()
						}
					}
					_, err := u.Associate(ctxTimeout(t))
					if !errors.Is(err, upstream.ErrUDPUnsupported) || !strings.HasPrefix(err.Error(), "upstream web: associate: ") {
						t.Errorf("Associate: %v, want ErrUDPUnsupported", err)
					}
				})
			}
		}
	}
}

func TestHTTPConnectFailures(t *testing.T) {
	target := startTarget(t)
	serverTLS, caPEM := httpconnecttest.TLS(t)
	_, otherCA := httpconnecttest.TLS(t)
	roots, other := x509.NewCertPool(), x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	other.AppendCertsFromPEM(otherCA)
	withAuth := httpconnecttest.Start(t, httpconnecttest.Options{Username: proxyUser, Password: proxyPass})
	tlsProxy := httpconnecttest.Start(t, httpconnecttest.Options{TLS: serverTLS})
	plain := httpconnecttest.Start(t, httpconnecttest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	d := upstream.Addr{IP: target.Addr(), Port: target.Port()}
	tests := []struct {
		name        string
		cfg         upstream.Config
		dst         upstream.Addr
		wantIs      error
		wantRefused bool
		wantMsg     string
	}{
		{"wrong-password", upstream.Config{Type: upstream.HTTP, Port: withAuth.Addr.Port(), Username: proxyUser, Password: "wrong-Secret"},
			d, httpconnect.ErrAuthFailed, false, `proxy answered 407 "Proxy Authentication Required": credentials rejected`},
		{"no-credentials", upstream.Config{Type: upstream.HTTP, Port: withAuth.Addr.Port()},
			d, httpconnect.ErrAuthRequired, false, "proxy requires authentication"},
		{"tls-unknown-ca", upstream.Config{Type: upstream.HTTPS, Port: tlsProxy.Addr.Port(), RootCAs: other},
			d, nil, false, "tls with proxy 127.0.0.1:"},
		{"tls-system-roots", upstream.Config{Type: upstream.HTTPS, Port: tlsProxy.Addr.Port()},
			d, nil, false, "tls with proxy 127.0.0.1:"},
		{"https-to-plain-proxy", upstream.Config{Type: upstream.HTTPS, Port: plain.Addr.Port(), RootCAs: roots},
			d, nil, false, "tls with proxy 127.0.0.1:"},
		{"http-to-tls-proxy", upstream.Config{Type: upstream.HTTP, Port: tlsProxy.Addr.Port()},
			d, nil, false, "http connect: read response: "},
		// go-socks5 takes "CO" for a greeting with 0x4f methods and waits
		// for them: the flow's deadline ends it.
		{"http-to-socks-proxy", upstream.Config{Type: upstream.HTTP, Port: func() uint16 { a, _ := startSOCKS(t, nil, false); return a.Port() }()},
			d, context.DeadlineExceeded, false, "http connect: read response: "},
		{"target-refused", upstream.Config{Type: upstream.HTTP, Port: plain.Addr.Port()},
			upstream.Addr{IP: closed.Addr(), Port: closed.Port()}, nil, true, `proxy answered 502 "Bad Gateway"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Name, tt.cfg.Host = "web", "127.0.0.1"
			u := newUpstream(t, tt.cfg, upstream.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			c, err := u.Connect(ctx, tt.dst, nil)
			if err == nil {
				c.Close()
				t.Fatal("Connect succeeded, want an error (fail closed)")
			}
			var ue *upstream.Error
			if !errors.As(err, &ue) || ue.Refused != tt.wantRefused {
				t.Errorf("error %#v, want Refused=%v", err, tt.wantRefused)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q, want it to contain %q", err, tt.wantMsg)
			}
			if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), proxyPass) {
				t.Errorf("error shows the password")
			}
			t.Logf("%v", err)
		})
	}
}
