// Package echotest serves the targets most loopback tests dial: a TCP listener on 127.0.0.1
// (or one the test made, in a namespace) that writes a banner to each connection, then
// echoes what it reads until the peer closes or the connection has been open for the given
// time; a UDP socket on 127.0.0.1 that answers each datagram with a prefix and the datagram.
// TCPPair connects two sockets of the test's own over loopback, for the tests that ask
// who owns a connection.
package echotest

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// Banner starts the target and returns its address. Each connection is closed at the
// latest after life. The listener and every connection are closed, and their goroutines
// waited for, when the test ends.
func Banner(t testing.TB, banner string, life time.Duration) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("echo target: listen: %v", err)
	}
	Serve(t, ln, banner, life)
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// Serve serves Banner's target on ln, a listener the test made elsewhere (in a network
// namespace of its own): the same banner, echo and life; ln and every connection still
// open are closed, and their goroutines waited for, when the test ends.
func Serve(t testing.TB, ln net.Listener, banner string, life time.Duration) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   = map[net.Conn]struct{}{}
		closed bool // the test ended: a connection accepted since is closed at once
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			open[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}()
				_ = c.SetDeadline(time.Now().Add(life))
				if _, err := io.WriteString(c, banner); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// UDP starts the UDP target and returns its address: each datagram is answered, to its
// sender, with prefix followed by the datagram. The socket is closed, and its goroutine
// waited for, when the test ends.
func UDP(t testing.TB, prefix string) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("udp echo: listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(prefix), buf[:n]...), from)
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// TCPPair connects a TCP client to a listener on 127.0.0.1 and returns the client's end and
// the listener's; both ends and the listener are closed when the test ends.
func TCPPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tcp pair: listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("tcp pair: dial: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatalf("tcp pair: accept: %v", err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}
