package socks5_test

// Loopback integration against a SOCKS5 server nobody here wrote:
// github.com/things-go/go-socks5 v0.1.0 on 127.0.0.1:0, relaying to a target
// on 127.0.0.1:0 that writes a banner the moment it accepts, then echoes.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/echotest"
	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

const (
	proxyUser = "agent"
	proxyPass = "loopback-Secret-42"
	// ioTimeout bounds every wait of these tests on a connection.
	ioTimeout = 10 * time.Second
)

// startTarget runs a TCP server on 127.0.0.1:0 that sends banner at once on
// accept, then echoes. It stops at cleanup.
func startTarget(t testing.TB) netip.AddrPort {
	t.Helper()
	return echotest.Banner(t, banner, ioTimeout)
}

// startProxy runs go-socks5 (socks5test) with its username/password
// authenticator when creds is not nil.
func startProxy(t testing.TB, creds map[string]string) string {
	t.Helper()
	return socks5test.Start(t, socks5test.Options{Credentials: creds}).Addr.String()
}

// dialProxy connects to the proxy with a deadline for the whole test.
func dialProxy(t testing.TB, proxy string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", proxy, ioTimeout)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	return conn
}

func TestGoSocks5(t *testing.T) {
	target := startTarget(t)
	servers := []struct {
		name  string
		auth  *socks5.Auth
		creds map[string]string
	}{
		{"noauth", nil, nil},
		{"userpass", &socks5.Auth{Username: proxyUser, Password: proxyPass}, map[string]string{proxyUser: proxyPass}},
	}
	dsts := []struct {
		name string
		dst  socks5.Addr
	}{
		{"ip", socks5.Addr{IP: target.Addr(), Port: target.Port()}},
		{"name-localhost", socks5.Addr{Name: "localhost", Port: target.Port()}},
	}
	for _, srv := range servers {
		proxy := startProxy(t, srv.creds)
		for _, d := range dsts {
			for _, pipeline := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/pipeline=%v", srv.name, d.name, pipeline)
				t.Run(name, func(t *testing.T) {
					conn := dialProxy(t, proxy)
					c := socks5.Client{Auth: srv.auth, Pipeline: pipeline}
					bound, err := c.Handshake(conn, d.dst)
					if err != nil {
						t.Fatalf("Handshake: %v", err)
					}
					// go-socks5 binds the proxy's local end toward the target.
					if !bound.IP.IsLoopback() || bound.Port == 0 || bound.Name != "" {
						t.Errorf("bound = %v, want a loopback address with a port", bound)
					}
					got := make([]byte, len(banner))
					if _, err := io.ReadFull(conn, got); err != nil {
						t.Fatalf("read banner: %v", err)
					}
					if string(got) != banner {
						t.Errorf("banner %q, want %q", got, banner)
					}
					const ping = "ping 1234567890\n"
					if _, err := io.WriteString(conn, ping); err != nil {
						t.Fatalf("write: %v", err)
					}
					echo := make([]byte, len(ping))
					if _, err := io.ReadFull(conn, echo); err != nil {
						t.Fatalf("read echo: %v", err)
					}
					if string(echo) != ping {
						t.Errorf("echo %q, want %q", echo, ping)
					}
				})
			}
		}
	}
}

func TestGoSocks5Failures(t *testing.T) {
	target := startTarget(t)
	dst := socks5.Addr{IP: target.Addr(), Port: target.Port()}
	noauth := startProxy(t, nil)
	userpass := startProxy(t, map[string]string{proxyUser: proxyPass})

	// A port where nothing listens: go-socks5 answers "connection refused".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	closed := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()

	tests := []struct {
		name    string
		proxy   string
		auth    *socks5.Auth
		dst     socks5.Addr
		wantIs  error
		wantRep int // REP of a wanted *ReplyError, -1 for none
	}{
		{"wrong-password", userpass, &socks5.Auth{Username: proxyUser, Password: "wrong-" + proxyPass}, dst, socks5.ErrAuthFailed, -1},
		{"wrong-user", userpass, &socks5.Auth{Username: "nobody", Password: proxyPass}, dst, socks5.ErrAuthFailed, -1},
		{"no-credentials-for-userpass-proxy", userpass, nil, dst, socks5.ErrNoAcceptableMethods, -1},
		{"credentials-for-noauth-proxy", noauth, &socks5.Auth{Username: proxyUser, Password: proxyPass}, dst, socks5.ErrNoAcceptableMethods, -1},
		{"refused", noauth, nil, socks5.Addr{IP: closed.Addr(), Port: closed.Port()}, nil, int(socks5.RepConnectionRefused)},
		{"refused-name", noauth, nil, socks5.Addr{Name: "localhost", Port: closed.Port()}, nil, int(socks5.RepConnectionRefused)},
	}
	for _, tt := range tests {
		for _, pipeline := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pipeline=%v", tt.name, pipeline), func(t *testing.T) {
				conn := dialProxy(t, tt.proxy)
				c := socks5.Client{Auth: tt.auth, Pipeline: pipeline}
				_, err := c.Handshake(conn, tt.dst)
				if err == nil {
					t.Fatal("Handshake succeeded, want an error")
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("error %v, want errors.Is %v", err, tt.wantIs)
				}
				var re *socks5.ReplyError
				if gotAs := errors.As(err, &re); gotAs != (tt.wantRep >= 0) || gotAs && re.Code != byte(tt.wantRep) {
					t.Errorf("error %v: ReplyError %v %+v, want code %d", err, gotAs, re, tt.wantRep)
				}
				for _, verb := range []string{"%v", "%+v", "%#v"} {
					if s := fmt.Sprintf(verb, err); strings.Contains(s, proxyPass) {
						t.Errorf("error (%s) contains the password: %s", verb, s)
					}
				}
				t.Logf("error: %v", err)
			})
		}
	}
}

// BenchmarkGoSocks5 measures a whole proxied connection over loopback:
// dial the proxy, handshake, read the target's banner, close. Pipelining
// saves round trips, which loopback makes nearly free; the figure is an
// upper bound of what the client costs, not a model of a remote proxy.
func BenchmarkGoSocks5(b *testing.B) {
	target := startTarget(b)
	for _, auth := range []*socks5.Auth{nil, {Username: proxyUser, Password: proxyPass}} {
		var creds map[string]string
		name := "noauth"
		if auth != nil {
			creds = map[string]string{proxyUser: proxyPass}
			name = "userpass"
		}
		proxy := startProxy(b, creds)
		for _, pipeline := range []bool{false, true} {
			b.Run(name+"/pipeline="+strconv.FormatBool(pipeline), func(b *testing.B) {
				c := socks5.Client{Auth: auth, Pipeline: pipeline}
				dst := socks5.Addr{IP: target.Addr(), Port: target.Port()}
				buf := make([]byte, len(banner))
				b.ReportAllocs()
				for b.Loop() {
					conn, err := net.DialTimeout("tcp", proxy, ioTimeout)
					if err != nil {
						b.Fatal(err)
					}
					_ = conn.SetDeadline(time.Now().Add(ioTimeout))
					if _, err := c.Handshake(conn, dst); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(conn, buf); err != nil {
						b.Fatal(err)
					}
					conn.Close()
				}
			})
		}
	}
}

// startUDPEcho runs a UDP server on 127.0.0.1:0 that answers every datagram
// with "echo:" and the datagram. It stops at cleanup.
func startUDPEcho(t testing.TB) netip.AddrPort {
	t.Helper()
	return echotest.UDP(t, "echo:")
}

// TestGoSocks5UDP associates with go-socks5, then sends datagrams through
// its relay to a UDP echo server, by IP and by name, and reads the answers
// back with their headers.
func TestGoSocks5UDP(t *testing.T) {
	if !winetest.UDPUsable(t) {
		// go-socks5 cannot open its relay either: it answers "general
		// failure", and Associate reports it.
		c := socks5.Client{Pipeline: true}
		_, err := c.Associate(dialProxy(t, startProxy(t, nil)), socks5.Addr{})
		var re *socks5.ReplyError
		if !errors.As(err, &re) || re.Code != socks5.RepGeneralFailure {
			t.Errorf("Associate without UDP sockets: %v, want a general failure reply", err)
		}
		return
	}
	echo := startUDPEcho(t)
	for _, auth := range []*socks5.Auth{nil, {Username: proxyUser, Password: proxyPass}} {
		var creds map[string]string
		if auth != nil {
			creds = map[string]string{proxyUser: proxyPass}
		}
		proxy := startProxy(t, creds)
		for _, pipeline := range []bool{false, true} {
			t.Run(fmt.Sprintf("auth=%v/pipeline=%v", auth != nil, pipeline), func(t *testing.T) {
				ctrl := dialProxy(t, proxy)
				c := socks5.Client{Auth: auth, Pipeline: pipeline}
				relay, err := c.Associate(ctrl, socks5.Addr{})
				if err != nil {
					t.Fatalf("Associate: %v", err)
				}
				if !relay.IP.IsLoopback() || relay.Port == 0 {
					t.Fatalf("relay %v, want a loopback address with a port", relay)
				}
				uc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(relay.IP, relay.Port)))
				if err != nil {
					t.Fatalf("dial relay: %v", err)
				}
				defer uc.Close()
				_ = uc.SetDeadline(time.Now().Add(ioTimeout))
				for _, dst := range []socks5.Addr{
					{IP: echo.Addr(), Port: echo.Port()},
					{Name: "localhost", Port: echo.Port()},
				} {
					msg, err := socks5.AppendUDPHeader(nil, dst)
					if err != nil {
						t.Fatalf("AppendUDPHeader: %v", err)
					}
					msg = append(msg, "ping "+dst.String()...)
					if _, err := uc.Write(msg); err != nil {
						t.Fatalf("write datagram: %v", err)
					}
					buf := make([]byte, 64<<10)
					n, err := uc.Read(buf)
					if err != nil {
						t.Fatalf("read datagram: %v", err)
					}
					from, hl, err := socks5.ParseUDPHeader(buf[:n])
					if err != nil {
						t.Fatalf("ParseUDPHeader(% x): %v", buf[:n], err)
					}
					// go-socks5 answers with the header the client sent.
					if from != dst {
						t.Errorf("answer from %v, want %v", from, dst)
					}
					if got, want := string(buf[hl:n]), "echo:ping "+dst.String(); got != want {
						t.Errorf("answer %q, want %q", got, want)
					}
				}
			})
		}
	}
}
