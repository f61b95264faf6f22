package httpconnect_test

// Loopback integration against httpconnecttest's proxy (net/http's server
// parses the requests), relaying to a target on 127.0.0.1:0 that writes a
// banner the moment it accepts, then echoes.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/router/upstream/httpconnect"
	"github.com/agentcage/router/router/upstream/httpconnect/httpconnecttest"
)

const ioTimeout = 10 * time.Second

func startTarget(t *testing.T) netip.AddrPort {
	t.Helper()
	return echotest.Banner(t, banner, ioTimeout)
}

func dial(t *testing.T, p *httpconnecttest.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr.String(), ioTimeout)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	return c
}

// exchange reads the banner, then checks an echo, through conn.
func exchange(t *testing.T, conn io.ReadWriter) {
	t.Helper()
	got := make([]byte, len(banner))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != banner {
		t.Fatalf("banner %q, %v; want %q", got, err, banner)
	}
	const ping = "ping 1234567890\n"
	if _, err := io.WriteString(conn, ping); err != nil {
		t.Fatalf("write: %v", err)
	}
	echo := make([]byte, len(ping))
	if _, err := io.ReadFull(conn, echo); err != nil || string(echo) != ping {
		t.Fatalf("echo %q, %v; want %q", echo, err, ping)
	}
}

func TestLoopback(t *testing.T) {
	target := startTarget(t)
	serverTLS, caPEM := httpconnecttest.TLS(t)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM not accepted")
	}
	for _, useTLS := range []bool{false, true} {
		for _, withAuth := range []bool{false, true} {
			opts := httpconnecttest.Options{}
			var auth *httpconnect.Auth
			if withAuth {
				opts.Username, opts.Password = "agent", "loopback-Secret-42"
				auth = &httpconnect.Auth{Username: "agent", Password: "loopback-Secret-42"}
			}
			if useTLS {
				opts.TLS = serverTLS
			}
			p := httpconnecttest.Start(t, opts)
			for _, host := range []string{"127.0.0.1", "localhost"} {
				name := map[bool]string{false: "http", true: "https"}[useTLS] + map[bool]string{false: "/noauth/", true: "/auth/"}[withAuth] + host
				t.Run(name, func(t *testing.T) {
					var conn net.Conn = dial(t, p)
					if useTLS {
						tc := tls.Client(conn, &tls.Config{ServerName: "127.0.0.1", RootCAs: roots})
						if err := tc.Handshake(); err != nil {
							t.Fatalf("TLS: %v", err)
						}
						conn = tc
					}
					c := httpconnect.Client{Auth: auth}
					resp, err := c.Handshake(conn, host, target.Port())
					if err != nil {
						t.Fatalf("Handshake: %v", err)
					}
					if resp.StatusCode != 200 {
						t.Errorf("status %d", resp.StatusCode)
					}
					exchange(t, conn)
				})
			}
		}
	}
}

func TestLoopbackFailures(t *testing.T) {
	target := startTarget(t)
	p := httpconnecttest.Start(t, httpconnecttest.Options{Username: "agent", Password: "loopback-Secret-42"})
	open := httpconnecttest.Start(t, httpconnecttest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	tests := []struct {
		name     string
		proxy    *httpconnecttest.Proxy
		auth     *httpconnect.Auth
		port     uint16
		wantIs   error
		wantCode int
	}{
		{"wrong-password", p, &httpconnect.Auth{Username: "agent", Password: "wrong-Secret"}, target.Port(), httpconnect.ErrAuthFailed, 407},
		{"no-credentials", p, nil, target.Port(), httpconnect.ErrAuthRequired, 407},
		{"target-closed", open, nil, closed.Port(), nil, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.proxy.Refused()
			_, err := (&httpconnect.Client{Auth: tt.auth}).Handshake(dial(t, tt.proxy), "127.0.0.1", tt.port)
			var se *httpconnect.StatusError
			if !errors.As(err, &se) || se.Code != tt.wantCode {
				t.Fatalf("error %v, want status %d", err, tt.wantCode)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
			}
			if tt.wantCode == 407 && tt.proxy.Refused() != before+1 {
				t.Errorf("proxy refused %d requests, want %d", tt.proxy.Refused(), before+1)
			}
		})
	}
}

// TestLoopbackPipelined sends the client's first bytes in the same write as
// the request: the proxy relays them once the tunnel is open.
func TestLoopbackPipelined(t *testing.T) {
	target := startTarget(t)
	p := httpconnecttest.Start(t, httpconnecttest.Options{})
	conn := dial(t, p)
	req, err := httpconnect.AppendRequest(nil, "127.0.0.1", target.Port(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const early = "early bytes\n"
	if _, err := conn.Write(append(req, early...)); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := httpconnect.ReadResponse(conn)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("ReadResponse: %+v, %v", resp, err)
	}
	got := make([]byte, len(banner)+len(early))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != banner+early {
		t.Fatalf("read %q, %v; want the banner and the echo of the early bytes", got, err)
	}
}
