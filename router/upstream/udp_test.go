package upstream_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/upstream"
)

// cutter is a TCP forwarder on 127.0.0.1:0 in front of a proxy, whose
// connections the test can cut: the proxy's end of a control connection
// then closes, as when the proxy restarts or the path breaks.
type cutter struct {
	addr  netip.AddrPort
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startCutter(t *testing.T, to netip.AddrPort) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{addr: ln.Addr().(*net.TCPAddr).AddrPort(), ln: ln}
	c.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to.String())
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			c.wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			c.wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		c.cut()
		c.wg.Wait()
	})
	return c
}

// cut closes every connection through the forwarder.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// roundTrip sends payload to d through a and returns the answer.
func roundTrip(t *testing.T, a upstream.Association, d upstream.Addr, payload string) (string, upstream.Addr) {
	t.Helper()
	if n, err := a.WriteTo([]byte(payload), d); err != nil || n != len(payload) {
		t.Fatalf("WriteTo %v: %d, %v", d, n, err)
	}
	buf := make([]byte, 64<<10)
	n, src, err := a.ReadFrom(buf)
	if err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	return string(buf[:n]), src
}

func TestSOCKS5Associate(t *testing.T) {
	if !winetest.UDPUsable(t) {
		assertNoUDPFailsClosed(t)
		return
	}
	echo := startUDPEcho(t)
	for _, withAuth := range []bool{false, true} {
		for _, pipeline := range []bool{false, true} {
			t.Run(fmt.Sprintf("auth=%v/pipeline=%v", withAuth, pipeline), func(t *testing.T) {
				proxy, _ := startSOCKS(t, nil, withAuth)
				cfg := upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Port(), Pipeline: pipeline}
				if withAuth {
					cfg.Username, cfg.Password = proxyUser, proxyPass
				}
				var cd countingDial
				u := newUpstream(t, cfg, upstream.Options{Dial: cd.dial})
				a, err := u.Associate(ctxTimeout(t))
				if err != nil {
					t.Fatalf("Associate: %v", err)
				}
				defer a.Close()
				// By IP, and by name: a fake-IP flow's name goes in the header.
				for _, d := range []upstream.Addr{{IP: echo.Addr(), Port: echo.Port()}, {Name: "localhost", Port: echo.Port()}} {
					got, src := roundTrip(t, a, d, "ping "+d.String())
					if want := "echo:ping " + d.String(); got != want {
						t.Errorf("answer %q, want %q", got, want)
					}
					if src != d { // go-socks5 answers with the header it was sent
						t.Errorf("answer from %v, want %v", src, d)
					}
				}
				if cd.tcp.Load() != 1 || cd.udp.Load() != 1 {
					t.Errorf("dials tcp=%d udp=%d through the injected dialer, want 1 each", cd.tcp.Load(), cd.udp.Load())
				}
				if a.Err() != nil {
					t.Errorf("Err() = %v on a live association", a.Err())
				}
			})
		}
	}
}

// TestAssociationConcurrent sends from several goroutines at once while one
// goroutine reads every answer and hands it to its sender. Each sender has
// one datagram in flight, sent again after 200ms without an answer
// (loopback UDP drops when a socket's buffer is full).
func TestAssociationConcurrent(t *testing.T) {
	if !winetest.UDPUsable(t) {
		assertNoUDPFailsClosed(t)
		return
	}
	echo := startUDPEcho(t)
	proxy, _ := startSOCKS(t, nil, false)
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Port()}, upstream.Options{})
	a, err := u.Associate(ctxTimeout(t))
	if err != nil {
		t.Fatalf("Associate: %v", err)
	}
	defer a.Close()
	const senders, each = 4, 25
	d := upstream.Addr{IP: echo.Addr(), Port: echo.Port()}
	answers := make([]chan string, senders)
	for i := range answers {
		answers[i] = make(chan string, 64)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 2048)
		for {
			n, _, err := a.ReadFrom(buf)
			if err != nil {
				return
			}
			var s, i int
			if _, err := fmt.Sscanf(string(buf[:n]), "echo:%d-%d", &s, &i); err != nil || s < 0 || s >= senders {
				t.Errorf("answer %q", buf[:n])
				continue
			}
			answers[s] <- string(buf[:n])
		}
	}()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				msg := fmt.Sprintf("%d-%d", s, i)
				got := false
				for attempt := 0; attempt < 20 && !got; attempt++ {
					if _, err := a.WriteTo([]byte(msg), d); err != nil {
						t.Errorf("WriteTo: %v", err)
						return
					}
					timeout := time.After(200 * time.Millisecond)
				wait:
					for {
						select {
						case ans := <-answers[s]:
							if ans == "echo:"+msg {
								got = true
								break wait
							} // an answer to an earlier copy
						case <-timeout:
							break wait
						}
					}
				}
				if !got {
					t.Errorf("no answer to %s after 20 sends", msg)
					return
				}
			}
		})
	}
	wg.Wait()
	a.Close()
	<-readDone
}

// TestAssociationDiesWithControl: when the proxy's end of the control
// connection closes, the association ends, says so, and sends nothing more.
func TestAssociationDiesWithControl(t *testing.T) {
	if !winetest.UDPUsable(t) {
		assertNoUDPFailsClosed(t)
		return
	}
	echo := startUDPEcho(t)
	proxy, _ := startSOCKS(t, nil, false)
	cut := startCutter(t, proxy)
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: cut.addr.Port()}, upstream.Options{})
	a, err := u.Associate(ctxTimeout(t))
	if err != nil {
		t.Fatalf("Associate: %v", err)
	}
	defer a.Close()
	d := upstream.Addr{IP: echo.Addr(), Port: echo.Port()}
	if got, _ := roundTrip(t, a, d, "before"); got != "echo:before" {
		t.Fatalf("answer %q", got)
	}
	readErr := make(chan error, 1)
	go func() {
		_, _, err := a.ReadFrom(make([]byte, 2048))
		readErr <- err
	}()
	cut.cut()
	select {
	case <-a.Done():
	case <-time.After(ioTimeout):
		t.Fatal("association still alive after its control connection closed")
	}
	if err := a.Err(); !errors.Is(err, upstream.ErrAssociationLost) {
		t.Errorf("Err() = %v, want ErrAssociationLost", err)
	}
	if err := <-readErr; !errors.Is(err, upstream.ErrAssociationLost) {
		t.Errorf("blocked ReadFrom returned %v, want ErrAssociationLost", err)
	}
	if _, err := a.WriteTo([]byte("after"), d); !errors.Is(err, upstream.ErrAssociationLost) {
		t.Errorf("WriteTo after the end: %v, want ErrAssociationLost", err)
	}
	// Close after the end keeps the first cause.
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := a.Err(); !errors.Is(err, upstream.ErrAssociationLost) {
		t.Errorf("Err() after Close = %v, want the first cause", err)
	}
	// A new association works (the caller re-makes it).
	b, err := u.Associate(ctxTimeout(t))
	if err != nil {
		t.Fatalf("Associate again: %v", err)
	}
	defer b.Close()
	if got, _ := roundTrip(t, b, d, "again"); got != "echo:again" {
		t.Errorf("answer %q", got)
	}
}

func TestAssociationClose(t *testing.T) {
	if !winetest.UDPUsable(t) {
		assertNoUDPFailsClosed(t)
		return
	}
	proxy, _ := startSOCKS(t, nil, false)
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Port()}, upstream.Options{})
	a, err := u.Associate(ctxTimeout(t))
	if err != nil {
		t.Fatalf("Associate: %v", err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, _, err := a.ReadFrom(make([]byte, 2048))
		readErr <- err
	}()
	a.Close()
	<-a.Done()
	if err := <-readErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after Close: %v, want net.ErrClosed", err)
	}
	if _, err := a.WriteTo([]byte("x"), upstream.Addr{Name: "localhost", Port: 1}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteTo after Close: %v, want net.ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestAssociateRefused: a proxy that refuses UDP ASSOCIATE fails the call;
// nothing is sent any other way.
func TestAssociateRefused(t *testing.T) {
	// Reads the method offer and the request (3+10 bytes); answers: no authentication,
	// command not supported.
	port := scriptedProxy(t, 3+10, "\x05\x00\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00", false)
	var cd countingDial
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: port, Pipeline: true},
		upstream.Options{Dial: cd.dial})
	_, err := u.Associate(ctxTimeout(t))
	var ue *upstream.Error
	if !errors.As(err, &ue) || ue.Refused || ue.Op != "associate" {
		t.Fatalf("Associate: %v, want a failure of the upstream", err)
	}
	if want := "upstream exit: associate: socks5 associate: command not supported (reply 0x07)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if cd.udp.Load() != 0 {
		t.Errorf("%d UDP sockets opened, want none", cd.udp.Load())
	}
}

// TestAssociateUnspecifiedRelay: a proxy that reports its relay as 0.0.0.0
// (listening on every interface) is reached at its own address.
func TestAssociateUnspecifiedRelay(t *testing.T) {
	if !winetest.UDPUsable(t) {
		assertNoUDPFailsClosed(t)
		return
	}
	relay, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	port := relay.LocalAddr().(*net.UDPAddr).Port
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 3+10)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		_, _ = c.Write([]byte{5, 0, 5, 0, 0, 1, 0, 0, 0, 0, byte(port >> 8), byte(port)})
		_, _ = c.Read(buf) // until the client closes
	}()
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: uint16(ln.Addr().(*net.TCPAddr).Port), Pipeline: true}, upstream.Options{})
	a, err := u.Associate(ctxTimeout(t))
	if err != nil {
		t.Fatalf("Associate: %v", err)
	}
	if _, err := a.WriteTo([]byte("hello"), upstream.Addr{Name: "example.com", Port: 7}); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	_ = relay.SetDeadline(time.Now().Add(ioTimeout))
	buf := make([]byte, 512)
	n, _, err := relay.ReadFrom(buf)
	if err != nil || !strings.HasSuffix(string(buf[:n]), "hello") {
		t.Errorf("relay read %q, %v", buf[:n], err)
	}
	a.Close()
	<-served
}

// assertNoUDPFailsClosed is what the UDP tests check where no UDP socket
// can be made (Wine 8, see winetest.UDPUsable): go-socks5 cannot open its
// relay and refuses the association; a proxy that grants one leaves
// Associate failing on its own UDP socket, with the control connection
// closed. Either way nothing is sent and the error says why.
func assertNoUDPFailsClosed(t *testing.T) {
	t.Helper()
	proxy, _ := startSOCKS(t, nil, false)
	u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Port()}, upstream.Options{})
	_, err := u.Associate(ctxTimeout(t))
	var ue *upstream.Error
	if !errors.As(err, &ue) || ue.Refused || !strings.Contains(err.Error(), "general SOCKS server failure (reply 0x01)") {
		t.Errorf("Associate through go-socks5: %v, want its general failure", err)
	}
	// A proxy that grants a relay at 127.0.0.1:9, then waits for the
	// client to close the control connection.
	port := scriptedProxy(t, 3+10, "\x05\x00\x05\x00\x00\x01\x7f\x00\x00\x01\x00\x09", true)
	var cd countingDial
	u = newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: port, Pipeline: true}, upstream.Options{Dial: cd.dial})
	_, err = u.Associate(ctxTimeout(t))
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "dial relay 127.0.0.1:9: ") {
		t.Errorf("Associate without a UDP socket: %v, want the relay dial's error", err)
	}
	if cd.udp.Load() != 1 {
		t.Errorf("%d UDP dials, want 1", cd.udp.Load())
	}
}
