package upstream_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/httpconnect/httpconnecttest"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

func TestConfigValidate(t *testing.T) {
	ok := upstream.Config{Name: "exit", Host: "proxy.example.net", Port: 1080}
	tests := []struct {
		name string
		edit func(*upstream.Config)
		want string // "" for valid
	}{
		{"socks5-default", func(*upstream.Config) {}, ""},
		{"ip", func(c *upstream.Config) { c.Host = "2001:db8::1" }, ""},
		{"https-ca", func(c *upstream.Config) { c.Type = upstream.HTTPS; c.RootCAs = newPool() }, ""},
		{"creds", func(c *upstream.Config) { c.Username, c.Password = "u", "p" }, ""},
		{"empty", func(c *upstream.Config) { *c = upstream.Config{} },
			`upstream "": name is empty` + "\nhost is empty\nport is 0"},
		{"type", func(c *upstream.Config) { c.Type = "socks6" }, `upstream "exit": type "socks6" unknown (want socks5, socks4, http or https)`},
		{"socks4 password", func(c *upstream.Config) { c.Type = upstream.SOCKS4; c.Username, c.Password = "u", "p" }, `upstream "exit": SOCKS4 has no password, only a user ID (Username)`},
		{"host", func(c *upstream.Config) { c.Host = "proxy example" }, `upstream "exit": host "proxy example" is neither an IP nor a host name`},
		{"user-only", func(c *upstream.Config) { c.Username = "u" }, `upstream "exit": username and password go together: give both or neither`},
		{"password-only", func(c *upstream.Config) { c.Password = "secret-pw" }, `upstream "exit": username and password go together: give both or neither`},
		{"long-password", func(c *upstream.Config) { c.Username, c.Password = "u", strings.Repeat("p", 256) }, `upstream "exit": the password is 256 bytes, longer than 255 (RFC 1929)`},
		{"http-colon", func(c *upstream.Config) { c.Type, c.Username, c.Password = upstream.HTTP, "a:b", "p" },
			`upstream "exit": an HTTP proxy's username cannot hold a colon (Basic authentication)`},
		{"http-ctl", func(c *upstream.Config) { c.Type, c.Username, c.Password = upstream.HTTP, "a", "secret\n" },
			`upstream "exit": the username or password holds a control character, which HTTP Basic authentication cannot carry`},
		{"ca-not-https", func(c *upstream.Config) { c.Type = upstream.HTTP; c.RootCAs = newPool() }, `upstream "exit": CA roots are for type https only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("Validate: %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the password")
			}
			if _, nerr := upstream.New(c, upstream.Options{Dial: socks5test.LoopbackDial}); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New: %v, want the Validate error", nerr)
			}
		})
	}
	if _, err := upstream.New(ok, upstream.Options{}); err == nil || err.Error() != `upstream "exit": Options.Dial is required` {
		t.Errorf("New without Dial: %v", err)
	}
	if _, err := upstream.New(ok, upstream.Options{Dial: socks5test.LoopbackDial}); err == nil ||
		err.Error() != `upstream "exit": Options.Resolve is required for host name "proxy.example.net"` {
		t.Errorf("New without Resolve: %v", err)
	}
}

func newPool() *x509.CertPool { return x509.NewCertPool() }

func TestLoadCAFile(t *testing.T) {
	dir := winetest.TempDir(t)
	_, caPEM := httpconnecttest.TLS(t)
	good := filepath.Join(dir, "ca.pem")
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(good, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pool, err := upstream.LoadCAFile(good); err != nil || pool == nil {
		t.Errorf("LoadCAFile(good): %v", err)
	}
	if _, err := upstream.LoadCAFile(bad); err == nil || !strings.Contains(err.Error(), "no PEM certificate in it") {
		t.Errorf("LoadCAFile(bad): %v", err)
	}
	if _, err := upstream.LoadCAFile(filepath.Join(dir, "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadCAFile(missing): %v", err)
	}
}

// scriptedProxy accepts one connection on 127.0.0.1:0, reads n bytes,
// writes answer, then closes; with hold, only once the client has closed.
func scriptedProxy(t *testing.T, n int, answer string, hold bool) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
			return
		}
		_, _ = io.WriteString(c, answer)
		if hold {
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestSent: a failure after a pipelined request may have delivered the
// early bytes (Sent, no failover); a failure that proves the request was
// not carried out, or a request without early bytes, is not Sent.
func TestSent(t *testing.T) {
	d := upstream.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 22}
	socksReq := 3 + 10 // greeting + CONNECT to an IPv4 address
	httpReq := len("CONNECT 192.0.2.1:22 HTTP/1.1\r\nHost: 192.0.2.1:22\r\n\r\n")
	tests := []struct {
		name     string
		typ      upstream.Type
		pipeline bool
		early    string
		read     int
		answer   string
		wantSent bool
	}{
		{"socks5-reply-lost", upstream.SOCKS5, true, "early", socksReq + 5, "\x05\x00", true},
		{"socks5-reply-lost-no-early", upstream.SOCKS5, true, "", socksReq, "\x05\x00", false},
		{"socks5-greeting-lost", upstream.SOCKS5, true, "early", socksReq + 5, "", false},
		{"socks5-refused", upstream.SOCKS5, true, "early", socksReq + 5, "\x05\x00\x05\x01\x00\x01\x00\x00\x00\x00\x00\x00", false},
		{"socks5-lockstep-reply-lost", upstream.SOCKS5, false, "early", 3, "\x05\x00", false},
		{"http-answer-lost", upstream.HTTP, true, "early", httpReq + 5, "", true},
		{"http-status", upstream.HTTP, true, "early", httpReq + 5, "HTTP/1.1 500 No\r\n\r\n", false},
		{"http-lockstep-answer-lost", upstream.HTTP, false, "early", httpReq, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := scriptedProxy(t, tt.read, tt.answer, false)
			u := newUpstream(t, upstream.Config{Name: "p", Type: tt.typ, Host: "127.0.0.1", Port: port, Pipeline: tt.pipeline}, upstream.Options{})
			_, err := u.Connect(ctxTimeout(t), d, []byte(tt.early))
			var ue *upstream.Error
			if !errors.As(err, &ue) || ue.Sent != tt.wantSent {
				t.Errorf("error %v (%+v), want Sent=%v", err, ue, tt.wantSent)
			}
		})
	}
}

// TestConnectCanceled: canceling the context wakes a handshake waiting on a
// silent proxy at once, and the upstream's health does not count it.
func TestConnectCanceled(t *testing.T) {
	port := scriptedProxy(t, 3, "", true) // reads the greeting, never answers
	u := newUpstream(t, upstream.Config{Name: "p", Host: "127.0.0.1", Port: port}, upstream.Options{})
	tr, err := upstream.Track(u, upstream.HealthConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = tr.Connect(ctx, upstream.Addr{Name: "example.com", Port: 80}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Connect returned after %v", took)
	}
	if s := tr.Status(); s.State != upstream.Unknown {
		t.Errorf("state %v after a canceled connect, want unknown", s.State)
	}
}

func TestErrorText(t *testing.T) {
	e := &upstream.Error{Upstream: "exit", Op: "connect", Dst: upstream.Addr{Name: "example.com", Port: 443}, Err: errors.New("boom")}
	if got, want := e.Error(), "upstream exit: connect example.com:443: boom"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	e = &upstream.Error{Upstream: "web", Op: "associate", Err: upstream.ErrUDPUnsupported}
	if got, want := e.Error(), "upstream web: associate: upstream cannot carry UDP"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(e, upstream.ErrUDPUnsupported) {
		t.Error("errors.Is(ErrUDPUnsupported) is false")
	}
}

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in   string
		want upstream.Addr
		err  string
	}{
		{"example.com:443", upstream.Addr{Name: "example.com", Port: 443}, ""},
		{"192.0.2.1:53", upstream.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 53}, ""},
		{"[2001:db8::1]:853", upstream.Addr{IP: netip.MustParseAddr("2001:db8::1"), Port: 853}, ""},
		{"[::ffff:192.0.2.1]:1", upstream.Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 1}, ""},
		{"example.com", upstream.Addr{}, `address "example.com": address example.com: missing port in address`},
		{"example.com:0", upstream.Addr{}, `address "example.com:0": port "0" is not 1 to 65535`},
		{"example.com:http", upstream.Addr{}, `address "example.com:http": port "http" is not 1 to 65535`},
		{":80", upstream.Addr{}, `address ":80": host "" is neither an IP nor a host name`},
		{"a b:80", upstream.Addr{}, `address "a b:80": host "a b" is neither an IP nor a host name`},
	}
	for _, tt := range tests {
		got, err := upstream.ParseAddr(tt.in)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParseAddr(%q): %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseAddr(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}
