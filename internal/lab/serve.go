package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/miekg/dns"
)

// startInetServers starts the internet's servers in inet: IP echo, DNS (UDP and TCP), UDP
// echo and go-socks5.
func (l *Lab) startInetServers(ctx context.Context, opts Options) error {
	// IP echo.
	ln, err := l.inet.Listen(ctx, "tcp", ServiceAddr+":80")
	if err != nil {
		return err
	}
	l.serveHTTP(ln, echoHandler(&l.httpLog))

	// The same echo over HTTPS, with a certificate of the lab's own CA, when asked.
	if opts.EchoTLS {
		ln, err = l.inet.Listen(ctx, "tcp", ServiceAddr+":443")
		if err != nil {
			return err
		}
		tc, caPEM, err := echoTLS()
		if err != nil {
			ln.Close()
			return err
		}
		l.echoCA = caPEM
		l.serveHTTP(tls.NewListener(ln, tc), echoHandler(&l.httpLog))
	}

	// DNS, UDP and TCP.
	pc, err := l.inet.ListenPacket(ctx, "udp", DNSAddr)
	if err != nil {
		return err
	}
	if err := l.serveDNS(ctx, &dns.Server{PacketConn: pc, Handler: dnsHandler(&l.dnsLog, opts.Names)}); err != nil {
		return err
	}
	ln, err = l.inet.Listen(ctx, "tcp", DNSAddr)
	if err != nil {
		return err
	}
	if err := l.serveDNS(ctx, &dns.Server{Listener: ln, Handler: dnsHandler(&l.dnsLog, opts.Names)}); err != nil {
		return err
	}

	// UDP echo.
	pc, err = l.inet.ListenPacket(ctx, "udp", UDPEchoAddr)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); serveUDPEcho(pc, &l.udpLog) }()
	l.addUndo(func() error {
		err := pc.Close()
		<-done
		return err
	})

	// go-socks5.
	ln, err = l.inet.Listen(ctx, "tcp", GoSocksAddr)
	if err != nil {
		return err
	}
	srv := newGoSocks(l.inet, opts.SocksUser, opts.SocksPassword, &l.socksLog)
	cs := startConnServer(ln, srv.ServeConn, &l.socksLog)
	l.addUndo(cs.close)
	l.logf("lab %s: echo, dns, udp echo and go-socks5 serving in %s", l.id, l.inet.Name())
	return nil
}

// serveHTTP serves h on ln until Close.
func (l *Lab) serveHTTP(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	l.addUndo(func() error {
		err := srv.Close()
		<-done
		return err
	})
}

// serveDNS starts srv (with its Listener or PacketConn set) and waits until it serves.
func (l *Lab) serveDNS(ctx context.Context, srv *dns.Server) error {
	closeSockets := func() {
		if srv.Listener != nil {
			srv.Listener.Close()
		}
		if srv.PacketConn != nil {
			srv.PacketConn.Close()
		}
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-done:
		closeSockets()
		return fmt.Errorf("dns server: %w", err)
	case <-ctx.Done():
		// It may still start; shut it down when it does.
		go func() {
			select {
			case <-started:
				_ = srv.Shutdown()
			case <-done:
				closeSockets()
			}
		}()
		return fmt.Errorf("dns server: %w", ctx.Err())
	}
	l.addUndo(func() error {
		err := srv.Shutdown()
		<-done
		return err
	})
	return nil
}

// startModel starts the model server on the host's loopback.
func (l *Lab) startModel(ctx context.Context, cfg modelConfig) error {
	ln, err := l.host.Listen(ctx, "tcp", ModelAddr)
	if err != nil {
		return err
	}
	l.serveHTTP(ln, modelHandler(cfg, &l.modelLog, &l.modelReqs))
	l.logf("lab %s: model server on %s in %s", l.id, ModelAddr, l.host.Name())
	return nil
}
