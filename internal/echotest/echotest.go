// Package echotest serves the TCP target most loopback tests dial: a listener on 127.0.0.1
// that writes a banner to each connection, then echoes what it reads until the peer closes
// or the connection has been open for the given time.
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
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
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
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}
