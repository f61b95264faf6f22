// Package httpconnecttest runs an HTTP CONNECT proxy on 127.0.0.1:0 for
// tests, with optional Basic credentials and TLS (an "https" proxy).
// net/http's server reads the requests (a parser nobody here wrote); the
// proxy answers 200 and relays, 407 to missing or wrong credentials, 405 to
// other methods, 502 when the target cannot be dialed. By default it dials
// loopback targets only, so no test traffic leaves the machine.
//
// It is test support, imported by tests only.
package httpconnecttest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Options configure a Proxy. The zero Options is a plain proxy without
// credentials that dials loopback targets only.
type Options struct {
	// Username and Password, when Username is not empty, are the Basic
	// credentials every request must carry in Proxy-Authorization.
	Username, Password string
	// TLS, when not nil, makes the proxy speak TLS on its port.
	TLS *tls.Config
	// Dial reaches the targets; nil dials loopback only, and takes
	// "localhost" as 127.0.0.1.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Proxy is a running CONNECT proxy. Its methods are safe for concurrent
// use.
type Proxy struct {
	// Addr is where the proxy listens.
	Addr netip.AddrPort

	opts     Options
	ln       net.Listener
	srv      *http.Server
	requests atomic.Int64
	refused  atomic.Int64
	served   chan struct{} // closed when Serve returned

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // tunnels
}

// Start runs a proxy until Close or the end of the test.
func Start(t testing.TB, opts Options) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("httpconnecttest: listen: %v", err)
	}
	p := &Proxy{
		Addr:   ln.Addr().(*net.TCPAddr).AddrPort(),
		opts:   opts,
		ln:     ln,
		served: make(chan struct{}),
		conns:  map[net.Conn]struct{}{},
	}
	if p.opts.Dial == nil {
		p.opts.Dial = loopbackOnly
	}
	p.srv = &http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
	}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	t.Cleanup(p.Close)
	return p
}

// Requests returns how many requests the proxy has read.
func (p *Proxy) Requests() int { return int(p.requests.Load()) }

// Refused returns how many requests it answered with 407.
func (p *Proxy) Refused() int { return int(p.refused.Load()) }

// Close stops the proxy: the listener, then every tunnel (as a proxy that
// dies would). It waits for the proxy's goroutines; calling it again does
// nothing.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.srv.Close()
	<-p.served
	p.wg.Wait()
}

// track adds a tunnel's two connections to those Close ends and counts the
// tunnel in wg; it reports false when the proxy is closed already (both are
// then closed).
func (p *Proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		a.Close()
		b.Close()
		return false
	}
	p.conns[a] = struct{}{}
	p.conns[b] = struct{}{}
	p.wg.Add(1)
	return true
}

// untrack closes a tunnel's connections and marks it done.
func (p *Proxy) untrack(a, b net.Conn) {
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
	a.Close()
	b.Close()
	p.wg.Done()
}

// ServeHTTP answers one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	if p.opts.Username != "" {
		// net/http parses Basic credentials of the Authorization field.
		ar := &http.Request{Header: http.Header{"Authorization": r.Header.Values("Proxy-Authorization")}}
		user, pass, ok := ar.BasicAuth()
		if !ok || user != p.opts.Username || pass != p.opts.Password {
			p.refused.Add(1)
			w.Header().Set("Proxy-Authenticate", `Basic realm="httpconnecttest"`)
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
	}
	target, err := p.opts.Dial(r.Context(), "tcp", r.Host)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		target.Close()
		return
	}
	if !p.track(conn, target) {
		return
	}
	defer p.untrack(conn, target)
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent with its request (pipelined) are in brw.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		if _, err := target.Write(early); err != nil {
			return
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(target, conn)
		if tc, ok := target.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(conn, target)
	conn.Close()
	target.Close()
	<-done
}

// loopbackOnly dials loopback targets, "localhost" as 127.0.0.1.
func loopbackOnly(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "localhost" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("httpconnecttest dials loopback only, not %q", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// TLS returns a server configuration for a proxy on 127.0.0.1 (certificate
// for 127.0.0.1, ::1 and "localhost", ECDSA P-256, valid for a day) and the
// PEM of the self-signed CA that issued it, for a client to pin.
func TLS(t testing.TB) (server *tls.Config, caPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("httpconnecttest: CA key: %v", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "httpconnecttest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("httpconnecttest: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("httpconnecttest: parse CA: %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("httpconnecttest: key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("httpconnecttest: certificate: %v", err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	return server, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
