package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
	socks5 "github.com/things-go/go-socks5"
	"github.com/things-go/go-socks5/statute"
)

// socksDialTimeout bounds go-socks5's outgoing connects and name lookups, which the library
// starts without a deadline.
const socksDialTimeout = 10 * time.Second

// newGoSocks builds the go-socks5 server of the inet namespace: outgoing TCP from ExitAddr,
// names resolved by the lab DNS server (from inside inet), UDP ASSOCIATE and BIND refused,
// user/password required when user is not empty. Errors of served connections go to errs.
func newGoSocks(inet *Netns, user, password string, errs *record[string]) *socks5.Server {
	opts := []socks5.Option{
		socks5.WithDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, socksDialTimeout)
			defer cancel()
			return inet.DialFrom(ctx, network, ExitAddr, addr)
		}),
		socks5.WithResolver(nsResolver{ns: inet}),
		socks5.WithLogger(recordLogger{errs}),
		socks5.WithAssociateHandle(func(_ context.Context, w io.Writer, _ *socks5.Request) error {
			_ = socks5.SendReply(w, statute.RepCommandNotSupported, nil)
			return errors.New("udp associate is not offered by the lab's go-socks5")
		}),
	}
	if user != "" {
		opts = append(opts, socks5.WithCredential(socks5.StaticCredentials{user: password}))
	}
	return socks5.NewServer(opts...)
}

type recordLogger struct{ rec *record[string] }

func (l recordLogger) Errorf(format string, args ...any) {
	l.rec.add(time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...))
}

// nsResolver resolves names with an A query to the lab DNS server, sent from inside ns.
type nsResolver struct{ ns *Netns }

func (r nsResolver) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	if ip := net.ParseIP(name); ip != nil {
		return ctx, ip, nil
	}
	ip, err := lookupA(ctx, r.ns, name)
	return ctx, ip, err
}

// lookupA asks the lab DNS server for name's A record over UDP from inside ns.
func lookupA(ctx context.Context, ns *Netns, name string) (net.IP, error) {
	ctx, cancel := context.WithTimeout(ctx, socksDialTimeout)
	defer cancel()
	c, err := ns.Dial(ctx, "udp", DNSAddr)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	co := &dns.Conn{Conn: c}
	if err := co.WriteMsg(q); err != nil {
		return nil, fmt.Errorf("resolve %s: send query: %w", name, err)
	}
	resp, err := co.ReadMsg()
	if err != nil {
		return nil, fmt.Errorf("resolve %s: read answer: %w", name, err)
	}
	if resp.Id != q.Id || resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("resolve %s: answer id %d rcode %s", name, resp.Id, dns.RcodeToString[resp.Rcode])
	}
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A, nil
		}
	}
	return nil, fmt.Errorf("resolve %s: no A record", name)
}

// connServer serves accepted connections with serve, one goroutine each, and can end them all.
type connServer struct {
	ln       net.Listener
	serve    func(net.Conn) error
	errs     *record[string]
	accepted chan struct{} // closed when the accept loop returned

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // counts serving goroutines
}

func startConnServer(ln net.Listener, serve func(net.Conn) error, errs *record[string]) *connServer {
	s := &connServer{ln: ln, serve: serve, errs: errs, accepted: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go s.acceptLoop()
	return s
}

func (s *connServer) acceptLoop() {
	defer close(s.accepted)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.errs.add("accept: " + err.Error())
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			if err := s.serve(c); err != nil {
				s.errs.add(time.Now().Format("15:04:05.000 ") + err.Error())
			}
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// close stops accepting, closes every served connection and waits (bounded) for the serving
// goroutines.
func (s *connServer) close() error {
	err := s.ln.Close()
	<-s.accepted
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(socksDialTimeout + 5*time.Second):
		return errors.Join(err, errors.New("connections still being served after close"))
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
