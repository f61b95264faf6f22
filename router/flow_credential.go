package router

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/internal/httphead"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"golang.org/x/net/http/httpguts"
)

// Credentials bound to a destination ([[credential]] destination = "name:port"): a flow
// that the router itself connects to that name and port (decided by the rules, direct or
// through a proxy) is read as HTTP/1.x (inside the TLS the router terminates, for a
// destination with tls_terminate: tlsBroker), request by request, and each request's
// placeholders are judged by the broker (broker.Broker.InjectTo): the value goes in place of
// the placeholder, or the request is refused as a canary. The responses are relayed as
// they come.
//
// The destination is the name the router owns, never one the guest wrote (ownName): the name
// behind a fake IP, or the name an inbound's client asked for (it has no address of its own).
// For both, every way out connects to that name as the router (or the proxy) resolves it
// (policy: byname.go), whatever the request's Host says. A flow to an address the guest chose
// has no such name: a Host header or TLS server name that names the destination at another
// address is read by the canary like any other first bytes (canary.go), and refused.

// brokerFlow is a flow to a brokered destination (FlowRecord.broker).
type brokerFlow struct {
	dest  string // "name:port", as broker.Broker.Binds takes it
	first []byte // the client's bytes read before the dial (a copy), served first
}

// maxBrokerHead bounds a request head (request line and header fields) on a brokered flow:
// the reader's buffer, held per connection.
const maxBrokerHead = 32 << 10

// errBrokerCanary and errBrokerMalformed end a brokered flow whose request was refused.
var (
	errBrokerCanary    = errors.New("a request carried a credential's placeholder where it must not go")
	errBrokerMalformed = errors.New("a request to a brokered destination that is not well-formed HTTP/1.x")
)

// ownName returns pf's name when the router owns it, lower case and without a trailing dot:
// the name behind a fake IP, or the one an inbound's client asked for (no address). A name
// from a DNS answer for a real address, or from the flow's first bytes, is not (false).
func (p *compiled) ownName(pf *policy.Flow) (string, bool) {
	if pf.Host == "" || p.Decision == nil {
		return "", false
	}
	if pf.Dst.IsValid() && !p.Decision.InPool(pf.Dst) {
		return "", false
	}
	name, fromSniff := p.Decision.Name(pf)
	if fromSniff || name == "" {
		return "", false
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")), true
}

// boundDest returns the destination "name:port" of pf when a credential is bound to it (see
// ownName); false otherwise, and always without credentials.
func (p *compiled) boundDest(pf *policy.Flow) (string, bool) {
	if p.Credentials.Empty() {
		return "", false
	}
	name, ok := p.ownName(pf)
	if !ok {
		return "", false
	}
	dest := net.JoinHostPort(name, strconv.Itoa(int(pf.Port)))
	return dest, p.Credentials.Binds(dest)
}

// brokered reports whether pf, decided d, is a flow to a brokered destination, and which:
// one the decision lets out (not a model gate's), to a bound destination. A router-owned
// name is always dialed by name (a direct verdict's ByName; a proxy gets the name).
func (p *compiled) brokered(pf *policy.Flow, d policy.Decision) (string, bool) {
	if p.Credentials.Empty() || !admits(d) || d.Action == rules.Direct && (!d.ByName || d.Untrusted) {
		return "", false
	}
	if _, gated := p.gate(pf, d); gated {
		return "", false
	}
	return p.boundDest(pf)
}

// relayBrokered relays a flow to a brokered destination (f.broker) between client and out
// until both directions end, then ends the flow as the relay's callback does (relayed). The
// client's requests are read one by one (bounded heads, unambiguous framing), judged, and
// written to out by net/http's writer; out's bytes are copied to the client as they come. A
// request the broker refuses (a canary) or that is not well-formed ends the flow: out is
// closed at once, the answers before it are let through, then the client gets a 403 (400)
// and the connection closes. An upgrade (Upgrade header, CONNECT) leaves the rest of the
// client's bytes unread: they are copied to out as they come, and no value goes in them.
// Both directions quiet for the idle timeout, or a reload's rules refusing the flow, end it.
// A destination whose TLS the router terminates (tlsBroker) is relayed the same way inside
// both TLS connections. It runs on its own goroutine.
func (r *Router) relayBrokered(p *compiled, f *FlowRecord, client *net.TCPConn, out net.Conn, release func()) {
	b := f.broker
	idle := r.relayFor(p).idle
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	cut := func() bool { return f.bytes.cut.Load() }
	f.bytes.watchCut(func() {
		client.SetDeadline(time.Unix(1, 0))
		out.SetDeadline(time.Unix(1, 0))
	})
	var cl net.Conn = client
	first := b.first
	if terminate, roots := p.Credentials.TLS(b.dest); terminate {
		guest, dst, err := r.tlsBroker(p, f, client, out, roots)
		if err != nil {
			if r.refuse.note("brokered TLS failed", f.Src.Addr().String()) {
				r.opts.Log.Warn("brokered destination: TLS failed; the flow is closed", "src", f.Src, "dst", b.dest, "err", err)
			}
			f.Err = err
			reset(client)
			out.Close()
			r.relayed(f, release)(result{err: err})
			return
		}
		cl, out = guest, dst
		first = nil // the ClientHello went to the handshake
	}
	var refusing atomic.Bool // the client is to get the refusal: its side stays open for it
	downDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(meterWriter{cl, &f.bytes.down}, idleReader{out, idle, &last, cut})
		if cw, ok := cl.(interface{ CloseWrite() error }); ok && !refusing.Load() {
			cw.CloseWrite()
		}
		downDone <- err
	}()
	up, overUpload := uploadCounted(meterWriter{out, &f.bytes.up}, f.bytes.upload)
	in := io.MultiReader(bytes.NewReader(first), idleReader{cl, idle, &last, cut})
	br := bufio.NewReaderSize(in, maxBrokerHead)
	answer, upErr := r.brokerRequests(p, f, br, up)
	if overUpload() {
		upErr = errOverUpload // net/http's writer does not wrap it
		lingerZero(client)    // cut: a reset, as the relay's
		lingerZero(out)
	}
	if answer != "" {
		refusing.Store(true)
		out.Close() // nothing more reaches the destination
	} else if cw, ok := out.(interface{ CloseWrite() error }); ok && upErr == nil {
		cw.CloseWrite()
	} else {
		out.Close()
	}
	downErr := <-downDone
	if answer != "" {
		cl.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(cl, answer)
	}
	cl.Close()
	out.Close()
	err := upErr
	if err == nil {
		err = downErr
	}
	if cut() {
		err = errCut
	} else if isTimeout(err) {
		err = errIdle
	}
	up2, down := f.bytes.load()
	r.relayed(f, release)(result{up: up2, down: down, err: err})
}

// tlsBroker terminates the guest's TLS on client with a certificate of the router's CA for
// the destination's name (the guest must trust the CA), after making its own TLS connection
// to the destination over out, verified for that name with roots (nil: the system's); both
// offer HTTP/1.1 only (ALPN), so a client that would speak HTTP/2 speaks HTTP/1.1. Both
// handshakes have the connect timeout. The client's bytes already read (f.broker.first, its
// ClientHello) go to the handshake first. Without a CA (Options.TLSCA) the flow fails.
func (r *Router) tlsBroker(p *compiled, f *FlowRecord, client *net.TCPConn, out net.Conn, roots *x509.CertPool) (net.Conn, net.Conn, error) {
	ca := r.opts.TLSCA
	if ca == nil {
		return nil, nil, errors.New("brokered destination: tls_terminate without the router's CA")
	}
	name, _, _ := net.SplitHostPort(f.broker.dest)
	ctx, cancel := context.WithTimeout(context.Background(), p.ConnectTimeout)
	defer cancel()
	up := tls.Client(out, &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := up.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("brokered destination: TLS to %s: %w", f.broker.dest, err)
	}
	leaf, err := ca.Leaf(name)
	if err != nil {
		up.Close()
		return nil, nil, fmt.Errorf("brokered destination: %w", err)
	}
	guest := tls.Server(prefixConn{client, bytes.NewReader(f.broker.first)}, &tls.Config{
		Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := guest.HandshakeContext(ctx); err != nil {
		up.Close()
		return nil, nil, fmt.Errorf("brokered destination: the guest's TLS for %s: %w", f.broker.dest, err)
	}
	return guest, up, nil
}

// prefixConn is a TCP connection whose reads return pre's bytes first.
type prefixConn struct {
	*net.TCPConn
	pre *bytes.Reader
}

func (c prefixConn) Read(p []byte) (int, error) {
	if c.pre.Len() > 0 {
		return c.pre.Read(p)
	}
	return c.TCPConn.Read(p)
}

// brokerRequests reads the client's requests from br and writes them to out, until the
// client ends its side (nil), a request is refused (answer: the HTTP answer to send the
// client, and the error the flow ends with), or a read or write fails.
func (r *Router) brokerRequests(p *compiled, f *FlowRecord, br *bufio.Reader, out io.Writer) (answer string, err error) {
	b := f.broker
	for {
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return "", nil
			}
			return "", err
		}
		req, why, err := httphead.Read(br)
		if err != nil {
			return "", err
		}
		if why != "" {
			r.opts.Log.Debug("brokered flow: request refused", "src", f.Src, "dst", b.dest, "why", why)
			return httpAnswer(http.StatusBadRequest, "router: refused: "+why), fmt.Errorf("%w: %s", errBrokerMalformed, why)
		}
		_, hit, found := p.Credentials.InjectTo(req.Header, req.Host, req.RequestURI, b.dest, f.Src.Addr())
		if found {
			path := req.URL.Path
			if len(path) > 200 {
				path = path[:200]
			}
			f.refused, f.why = true, refusal.Canary
			r.book.Add(refusal.Canary, refusal.Event{Src: f.Src, Dst: f.Dst, Host: f.Host, App: f.App,
				Rule: "credential " + hit.Credential, Request: req.Method + " " + path})
			if r.canaries.First(hit.Credential + " " + f.Src.Addr().String() + " " + b.dest) {
				r.opts.Log.Warn("canary: a request to a brokered destination carried a credential's placeholder where it must not go; refused",
					"credential", hit.Credential, "where", hit.Where, "src", f.Src, "dst", b.dest, "method", req.Method, "path", path)
			}
			return httpAnswer(http.StatusForbidden, "router: refused: a credential's placeholder where it must not go"), errBrokerCanary
		}
		upgrade := req.Method == http.MethodConnect || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade")
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // net/http's writer adds its own otherwise
		}
		if err := req.Write(out); err != nil {
			return "", fmt.Errorf("brokered flow: write the request: %w", err)
		}
		if upgrade {
			_, err := io.Copy(out, br)
			return "", err
		}
	}
}

// httpAnswer is a whole HTTP/1.1 answer with status code and a plain-text body, that closes
// the connection.
func httpAnswer(code int, body string) string {
	body += "\n"
	return "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// idleReader reads c, each read waiting up to idle (0: no limit); a read that times out while
// the other direction moved a byte within idle (last, shared by both) waits again, so the
// flow ends only when both directions were quiet for idle, or when cut reports the flow
// stopped.
type idleReader struct {
	c    net.Conn
	idle time.Duration
	last *atomic.Int64
	cut  func() bool
}

func (i idleReader) Read(p []byte) (int, error) {
	for {
		if i.idle > 0 && !i.cut() {
			i.c.SetReadDeadline(time.Now().Add(i.idle))
		}
		n, err := i.c.Read(p)
		now := time.Now()
		if n > 0 {
			i.last.Store(now.UnixNano())
		}
		if n == 0 && err != nil && isTimeout(err) && !i.cut() && now.Sub(time.Unix(0, i.last.Load())) < i.idle {
			continue
		}
		return n, err
	}
}

// meterWriter writes to w and counts what it wrote in n.
type meterWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (m meterWriter) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	m.n.Add(int64(n))
	return n, err
}
