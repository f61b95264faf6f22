package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/agentcage/router/router/upstream/httpconnect"
)

// httpUpstream is an HTTP CONNECT proxy, over TLS when tls is not nil.
type httpUpstream struct {
	name     string
	ep       *endpoint
	client   httpconnect.Client
	pipeline bool
	tls      *tls.Config // nil for plain TCP
}

func newHTTP(cfg Config, ep *endpoint) *httpUpstream {
	u := &httpUpstream{name: cfg.Name, ep: ep, pipeline: cfg.Pipeline}
	if cfg.Username != "" {
		u.client.Auth = &httpconnect.Auth{Username: cfg.Username, Password: cfg.Password}
	}
	if cfg.Type == HTTPS {
		u.tls = &tls.Config{
			ServerName: cfg.Host, // a name, or an IP that the certificate must list
			RootCAs:    cfg.RootCAs,
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			// Resumed sessions save a round trip on the next flows.
			ClientSessionCache: tls.NewLRUClientSessionCache(64),
		}
	}
	return u
}

func (u *httpUpstream) Name() string { return u.name }

// Connect asks the proxy for a tunnel to dst.
func (u *httpUpstream) Connect(ctx context.Context, dst Addr, early []byte) (net.Conn, error) {
	host := dst.Name
	if host == "" {
		host = dst.IP.String()
	}
	p := protocol{
		name: u.name, ep: u.ep, pipeline: u.pipeline,
		shake: func(hc *handshakeConn) error {
			_, err := u.client.Handshake(hc, host, dst.Port)
			return err
		},
		// A status answer means no tunnel: nothing was relayed.
		relayed: func(_ *handshakeConn, err error) bool {
			var se *httpconnect.StatusError
			return !errors.As(err, &se)
		},
		refused: isRefusal,
	}
	if u.tls != nil {
		p.secure = func(ctx context.Context, c net.Conn) (net.Conn, error) {
			tc := tls.Client(c, u.tls)
			if err := tc.HandshakeContext(ctx); err != nil {
				return tc, fmt.Errorf("tls with proxy %s: %w", u.ep, err)
			}
			return tc, nil
		}
	}
	return connectThrough(ctx, p, dst, early)
}

// Associate fails: HTTP CONNECT carries TCP only.
func (u *httpUpstream) Associate(context.Context) (Association, error) {
	return nil, &Error{Upstream: u.name, Op: "associate", Err: ErrUDPUnsupported}
}

// isHTTPRefusal reports whether err is an HTTP answer to CONNECT that
// blames the destination: 403 (the proxy's policy) or any 5xx (the proxy
// could not reach it, however it words that: tinyproxy answers 500 for an
// unreachable port). A proxy that answers at all is up; a guest must not be
// able to mark it down by naming unreachable places.
func isHTTPRefusal(err error) bool {
	var se *httpconnect.StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == 403 || se.Code >= 500 && se.Code <= 599
}
