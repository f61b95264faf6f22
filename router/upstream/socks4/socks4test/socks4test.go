// Package socks4test is a small SOCKS4 and SOCKS4a CONNECT server for tests, on
// 127.0.0.1:0. It reads the request byte by byte as the protocol describes it (not with
// package socks4, so a mistake there is not repeated here), dials the destination with the
// test's dial function, answers 90 or 91, and relays.
package socks4test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Server is a running SOCKS4/4a server. Its methods are safe for concurrent use.
type Server struct {
	Addr netip.AddrPort
	// NoNames makes the server a plain SOCKS4 one: a SOCKS4a request (DSTIP 0.0.0.x) gets 91.
	NoNames bool

	ln   net.Listener
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	wg   sync.WaitGroup

	mu    sync.Mutex // guards asked
	asked []string   // the destinations requested, "host:port", with the user ID as "user@"
}

// Start runs a server until the end of the test. dial reaches the destinations.
func Start(t testing.TB, dial func(ctx context.Context, network, addr string) (net.Conn, error), noNames bool) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("socks4test: listen: %v", err)
	}
	s := &Server{Addr: ln.Addr().(*net.TCPAddr).AddrPort(), NoNames: noNames, ln: ln, dial: dial}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

// Asked returns the destinations requested so far, in order, each "user@host:port".
func (s *Server) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

func readString(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice(0)
	if err != nil {
		return "", errors.New("no NUL-terminated field")
	}
	return string(b[:len(b)-1]), nil
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReaderSize(c, 512)
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil || head[0] != 4 || head[1] != 1 {
		return
	}
	port := binary.BigEndian.Uint16(head[2:4])
	ip := netip.AddrFrom4([4]byte(head[4:8]))
	user, err := readString(r)
	if err != nil {
		return
	}
	host := ip.String()
	a := head[4:8]
	if a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] != 0 {
		if host, err = readString(r); err != nil {
			return
		}
		if s.NoNames {
			host = ""
		}
	}
	s.mu.Lock()
	s.asked = append(s.asked, user+"@"+net.JoinHostPort(host, strconv.Itoa(int(port))))
	s.mu.Unlock()
	reply := func(code byte) error {
		_, err := c.Write([]byte{0, code, 0, 0, 0, 0, 0, 0})
		return err
	}
	if host == "" {
		_ = reply(91)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	d, err := s.dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
	cancel()
	if err != nil {
		_ = reply(91)
		return
	}
	defer d.Close()
	if reply(90) != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(d, r) // r holds what came after the request (pipelined bytes)
		if tc, ok := d.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, d)
	c.Close()
	<-done
}
