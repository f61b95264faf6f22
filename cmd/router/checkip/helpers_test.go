package checkip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// loopbackDialer dials through the real network stack, but only to loopback addresses: any
// other destination fails as if there were no route, so no test can send traffic elsewhere
// (the IPv6 route probe to 2001:db8::1 sees "no route"). It records what was refused.
type loopbackDialer struct {
	d       net.Dialer
	mu      sync.Mutex
	refused []string // guarded by mu
}

func (l *loopbackDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
		l.mu.Lock()
		l.refused = append(l.refused, network+" "+address)
		l.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: network, Err: errNoRoute()}
	}
	return l.d.DialContext(ctx, network, address)
}

func (l *loopbackDialer) Refused() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.refused...)
}

// fakeResolver answers from maps; a name in neither map is not found.
type fakeResolver struct {
	addrs map[string][]netip.Addr
	txt   map[string][]string
	delay time.Duration // before answering, unless ctx ends first
}

func (f fakeResolver) wait(ctx context.Context) error {
	if f.delay == 0 {
		return nil
	}
	select {
	case <-time.After(f.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	if a, ok := f.addrs[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f fakeResolver) LookupTXT(ctx context.Context, name string) ([]string, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	if t, ok := f.txt[name]; ok {
		return t, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// server is a loopback HTTP server that counts its requests.
type server struct {
	*httptest.Server
	hits atomic.Int32
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// remoteIP is the client address the server saw.
func remoteIP(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "bad remote " + r.RemoteAddr
	}
	return ap.Addr().Unmap().String()
}

// plainEcho answers the client address as text.
func plainEcho(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s\n", remoteIP(r)) }

// jsonEcho answers the client address as {"ip": ...}.
func jsonEcho(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"ip":%q,"country":"ZZ"}`, remoteIP(r))
}

// fixedAnswer answers body with status code.
func fixedAnswer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// hang blocks until the client gives up or the test ends.
func hang(t *testing.T) http.HandlerFunc {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}
}

// huge streams n bytes of digits, which would parse as nothing useful anyway.
func huge(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("1", 32<<10))
		for sent := 0; sent < n; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
}

// modelServer answers path with body and anything else with 404.
func modelServer(t *testing.T, path, body string) *server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/delete" { // behind the router's forward, as in the guest
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, refusedByForward)
			return
		}
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	})
}

// udpServer is a loopback UDP socket that answers each datagram with reply(datagram, source);
// a nil answer sends nothing.
func udpServer(t *testing.T, reply func(b []byte, from netip.AddrPort) []byte) string {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if out := reply(buf[:n], from); out != nil {
				pc.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// stunAs answers like a STUN server that sees the client as seen (or as it really is, when
// seen is invalid).
func stunAs(seen netip.AddrPort) func([]byte, netip.AddrPort) []byte {
	return func(b []byte, from netip.AddrPort) []byte {
		if !seen.IsValid() {
			seen = from
		}
		out, err := STUNAnswer(b, seen)
		if err != nil {
			return nil
		}
		return out
	}
}

// quiet are options that keep a Run on loopback: no UDP and no IPv6 probe unless a test turns
// them on, a short timeout.
func quiet(echo ...string) Options {
	return Options{Echo: echo, NoUDP: true, NoIPv6: true, Timeout: 2 * time.Second}
}

func deps() (Deps, *loopbackDialer) {
	d := &loopbackDialer{}
	return Deps{Dialer: d, Resolver: fakeResolver{}}, d
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func run(t *testing.T, opts Options, d Deps) Report {
	t.Helper()
	rep, err := Run(context.Background(), opts, d)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ld, ok := d.Dialer.(*loopbackDialer); ok {
		for _, r := range ld.Refused() {
			if !strings.Contains(r, "2001:db8::1") {
				t.Errorf("dial to a non-loopback destination was attempted: %s", r)
			}
		}
	}
	return rep
}

// udpUsable reports whether this process can open UDP sockets. It is false only under Wine 8,
// whose ws2_32 lacks SIO_UDP_NETRESET, which Go (1.23 and later) sets on every UDP socket on
// Windows (go.dev/issue/68614), so no UDP socket can be made at all; on Linux and on real
// Windows it is true. Any other failure ends the test.
func udpUsable(t *testing.T) bool {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err == nil {
		pc.Close()
		return true
	}
	if runtime.GOOS == "windows" && strings.Contains(err.Error(), "wsaioctl") && errors.Is(err, syscall.Errno(10045)) {
		t.Logf("no UDP sockets here (%v): Wine lacks SIO_UDP_NETRESET; asserting that the UDP check degrades to undecided instead", err)
		return false
	}
	t.Fatalf("listen udp: %v", err)
	return false
}

// assertUDPUndecided runs the UDP probe where UDP sockets cannot be opened and checks that the
// check says so rather than passing on silence.
func assertUDPUndecided(t *testing.T) {
	t.Helper()
	echo := newServer(t, plainEcho)
	opts := quiet(echo.URL)
	opts.NoUDP = false
	opts.STUN = []string{"127.0.0.1:9"}
	d, _ := deps()
	rep := run(t, opts, d)
	if rep.UDP.Status != Unknown || !strings.Contains(rep.UDP.Detail, "not probed") {
		t.Errorf("udp = %v %q, want unknown, not probed", rep.UDP.Status, rep.UDP.Detail)
	}
}
