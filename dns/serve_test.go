package dns

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// serve runs s.Serve on fresh loopback sockets and returns their addresses and a stop
// function that cancels and checks that Serve returned nil.
func serve(t *testing.T, s *Server) (udpAddr, tcpAddr string, stop func()) {
	t.Helper()
	pc, ln, cancel, done := startServe(t, s)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return pc.LocalAddr().String(), ln.Addr().String(), stop
}

// startServe runs s.Serve on fresh loopback sockets; cancel ends its context, done is its
// result.
func startServe(t *testing.T, s *Server) (pc net.PacketConn, ln net.Listener, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- s.Serve(ctx, pc, ln) }()
	return pc, ln, cancel, result
}

func exchange(t *testing.T, network, addr string, q *mdns.Msg) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(q, addr)
	if err != nil {
		t.Fatalf("exchange over %s: %v", network, err)
	}
	return r
}

func TestServe(t *testing.T) {
	s, _, _ := newProxyServer(t, ModeFakeIP, newClock())
	udpAddr, tcpAddr, stop := serve(t, s)

	t.Run("A over UDP", func(t *testing.T) {
		q := query("example.com.", mdns.TypeA)
		check(t, q, exchange(t, "udp", udpAddr, q), want{answer: []string{"example.com. 10 IN A 198.18.0.1"}})
	})
	t.Run("A over TCP, same mapping", func(t *testing.T) {
		q := query("EXAMPLE.com.", mdns.TypeA)
		check(t, q, exchange(t, "tcp", tcpAddr, q), want{answer: []string{"EXAMPLE.com. 10 IN A 198.18.0.1"}})
	})
	t.Run("several queries on one TCP connection", func(t *testing.T) {
		conn, err := mdns.Dial("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for i, name := range []string{"a.example.", "b.example.", "a.example."} {
			q := query(name, mdns.TypeA)
			if err := conn.WriteMsg(q); err != nil {
				t.Fatal(err)
			}
			r, err := conn.ReadMsg()
			if err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
			if r.Id != q.Id || len(r.Answer) != 1 {
				t.Errorf("query %d: id %d answers %d, want id %d and 1 answer", i, r.Id, len(r.Answer), q.Id)
			}
		}
	})
	t.Run("CHAOS over UDP is REFUSED", func(t *testing.T) {
		q := new(mdns.Msg)
		q.Id = mdns.Id()
		q.Question = []mdns.Question{{Name: "version.bind.", Qtype: mdns.TypeTXT, Qclass: mdns.ClassCHAOS}}
		check(t, q, exchange(t, "udp", udpAddr, q), want{rcode: mdns.RcodeRefused})
	})
	t.Run("EDNS0 over UDP", func(t *testing.T) {
		q := query("edns.example.", mdns.TypeAAAA)
		q.SetEdns0(1232, false)
		r := exchange(t, "udp", udpAddr, q)
		check(t, q, r, nodata())
		if r.IsEdns0() == nil {
			t.Error("no OPT in the reply")
		}
	})
	t.Run("big relayed answer is truncated over UDP, whole over TCP", func(t *testing.T) {
		q := query("big.example.", mdns.TypeTXT)
		r := exchange(t, "udp", udpAddr, q)
		if !r.Truncated || len(r.Answer) >= 40 {
			t.Errorf("udp: TC %v with %d answers, want TC and fewer than 40", r.Truncated, len(r.Answer))
		}
		r = exchange(t, "tcp", tcpAddr, q)
		if r.Truncated || len(r.Answer) != 40 {
			t.Errorf("tcp: TC %v with %d answers, want no TC and 40", r.Truncated, len(r.Answer))
		}
	})
	t.Run("garbage over UDP gets FORMERR with its id", func(t *testing.T) {
		c, err := net.Dial("udp", udpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Header: id 0xbeef, RD, one question; then a name that runs off the end.
		if _, err := c.Write([]byte{0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 5, 'a', 'b'}); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		r := new(mdns.Msg)
		if err := r.Unpack(buf[:n]); err != nil {
			t.Fatalf("unpack: %v", err)
		}
		if r.Id != 0xbeef || r.Rcode != mdns.RcodeFormatError {
			t.Errorf("id %#x rcode %s, want 0xbeef FORMERR", r.Id, mdns.RcodeToString[r.Rcode])
		}
	})
	t.Run("stop closes the sockets", func(t *testing.T) {
		stop()
		c := &mdns.Client{Net: "tcp", Timeout: time.Second}
		if _, _, err := c.Exchange(query("example.com.", mdns.TypeA), tcpAddr); err == nil {
			t.Error("TCP exchange after stop succeeded, want an error")
		}
		pc, err := net.ListenPacket("udp", udpAddr)
		if err != nil {
			t.Errorf("UDP port still held after stop: %v", err)
		} else {
			pc.Close()
		}
	})
}

func TestServeOneSocket(t *testing.T) {
	s := newFakeIP(t, Config{})
	t.Run("UDP only", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, pc, nil) }()
		q := query("one.example.", mdns.TypeA)
		check(t, q, exchange(t, "udp", pc.LocalAddr().String(), q), want{answer: []string{"one.example. 10 IN A 198.18.0.1"}})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	})
	t.Run("TCP only", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, nil, ln) }()
		q := query("one.example.", mdns.TypeA)
		check(t, q, exchange(t, "tcp", ln.Addr().String(), q), want{answer: []string{"one.example. 10 IN A 198.18.0.1"}})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	})
	t.Run("as a miekg Handler", func(t *testing.T) {
		addr := startUDPTCP(t, s)
		q := query("big.example.", mdns.TypeA)
		check(t, q, exchange(t, "udp", addr, q), want{answer: []string{"big.example. 10 IN A 198.18.0.2"}})
		check(t, q, exchange(t, "tcp", addr, q), want{answer: []string{"big.example. 10 IN A 198.18.0.2"}})
	})
	t.Run("no socket", func(t *testing.T) {
		if err := s.Serve(context.Background(), nil, nil); err == nil {
			t.Error("Serve(nil, nil) = nil, want an error")
		}
	})
	t.Run("a listener that fails is reported and the other socket closed", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close() // Accept fails at once
		done := make(chan error, 1)
		go func() { done <- s.Serve(context.Background(), pc, ln) }()
		select {
		case err := <-done:
			if err == nil {
				t.Error("Serve = nil, want the accept error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return")
		}
		if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
			t.Errorf("write on the UDP socket after Serve = %v, want net.ErrClosed", err)
		}
	})
}

// TestServeStopClosesSockets: the daemon's stop cancels Serve's context and then closes its
// sockets, also while Serve is still starting (a start that failed further on); the closed
// sockets are the stop's, not a failure, so Serve returns nil (the daemon logged "use of
// closed network connection" as an error after every failed start).
func TestServeStopClosesSockets(t *testing.T) {
	s, _, _ := newProxyServer(t, ModeFakeIP, newClock())
	for i := range 20 {
		pc, ln, cancel, done := startServe(t, s)
		if i%2 == 1 { // serving: a query over TCP is answered; else stopped as it starts
			q := new(mdns.Msg)
			q.SetQuestion("example.com.", mdns.TypeA)
			exchange(t, "tcp", ln.Addr().String(), q)
		}
		cancel()
		pc.Close()
		ln.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Serve = %v, want nil (the stop closed the sockets)", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after the stop")
		}
	}
}
