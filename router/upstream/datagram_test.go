package upstream_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/upstream"
)

// sizeRelay is a SOCKS5 proxy that grants one UDP association whose relay (on relayAt)
// answers each datagram whose payload is a 4-byte big-endian size with a datagram of that
// many bytes (a byte pattern the test checks), from the address it was sent to.
func sizeRelay(t *testing.T, relayAt string) (proxy netip.AddrPort) {
	t.Helper()
	relay, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(relayAt)))
	if err != nil {
		t.Skipf("relay on %s: %v", relayAt, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 70000)
		for {
			n, from, err := relay.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n < 10+4 || buf[3] != 1 { // an IPv4 destination, then the size
				continue
			}
			size := int(binary.BigEndian.Uint32(buf[10:14]))
			out := append([]byte(nil), buf[:10]...)
			out = append(out, pattern(size)...)
			_, _ = relay.WriteToUDPAddrPort(out, from)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 3+10)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		ap := relay.LocalAddr().(*net.UDPAddr).AddrPort()
		rep := []byte{5, 0, 5, 0, 0}
		if ap.Addr().Is4() {
			rep = append(append(rep, 1), ap.Addr().AsSlice()...)
		} else {
			rep = append(append(rep, 4), ap.Addr().AsSlice()...)
		}
		rep = binary.BigEndian.AppendUint16(rep, ap.Port())
		_, _ = c.Write(rep)
		_, _ = c.Read(buf) // until the client closes
	}()
	t.Cleanup(func() {
		ln.Close()
		relay.Close()
		<-done
		<-done
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// TestDatagramNeverCut: answers of every size a relay can send arrive whole through an
// association read with a ReadBufLen buffer; read with a short buffer, an answer that does
// not fit is dropped whole (ErrTooLarge, with its length), never cut, and the association
// goes on. A datagram that with the header is more than a UDP socket can send is refused
// with ErrTooLarge and the association goes on.
func TestDatagramNeverCut(t *testing.T) {
	if !winetest.UDPUsable(t) {
		t.Skip("no UDP sockets here")
	}
	for _, tc := range []struct {
		name, relay string
		max         int // the longest answer the relay can send: 65,507 less its header (IPv4), or more (IPv6)
	}{
		{"ipv4 relay", "127.0.0.1:0", upstream.MaxDatagram - 10},
		{"ipv6 relay", "[::1]:0", upstream.MaxDatagram},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := sizeRelay(t, tc.relay)
			u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Port(), Pipeline: true}, upstream.Options{})
			a, err := u.Associate(ctxTimeout(t))
			if err != nil {
				t.Fatalf("Associate: %v", err)
			}
			defer a.Close()
			dst := upstream.Addr{IP: netip.MustParseAddr("192.0.2.7"), Port: 7}
			ask := func(size int, buf []byte) (int, error) {
				t.Helper()
				q := binary.BigEndian.AppendUint32(nil, uint32(size))
				if _, err := a.WriteTo(q, dst); err != nil {
					t.Fatalf("WriteTo: %v", err)
				}
				type res struct {
					n   int
					err error
				}
				got := make(chan res, 1)
				go func() {
					n, _, err := a.ReadFrom(buf)
					got <- res{n, err}
				}()
				select {
				case r := <-got:
					return r.n, r.err
				case <-time.After(5 * time.Second):
					t.Fatalf("size %d: no answer", size)
				}
				return 0, nil
			}
			sizes := []int{1, 2, 512, 1472, 1473, 8192, 16384, 16636, 16637, 16898, 30000, 32768, 32769, 50000, 65000, tc.max}
			big := make([]byte, upstream.ReadBufLen)
			for _, size := range sizes {
				n, err := ask(size, big)
				if err != nil {
					t.Errorf("size %d: %v", size, err)
					continue
				}
				if n != size || string(big[:n]) != string(pattern(size)) {
					t.Errorf("size %d: got %d bytes (or other bytes), want it whole", size, n)
				}
			}
			short := make([]byte, 16636)
			for _, size := range []int{16636, 16637, 30000, tc.max, 100} {
				n, err := ask(size, short)
				switch {
				case size <= len(short) && (err != nil || n != size || string(short[:n]) != string(pattern(size))):
					t.Errorf("short buffer, size %d: %d, %v; want it whole", size, n, err)
				case size > len(short) && (!errors.Is(err, upstream.ErrTooLarge) || n != size):
					t.Errorf("short buffer, size %d: %d, %v; want %d and ErrTooLarge (dropped whole)", size, n, err, size)
				}
			}
			if a.Err() != nil {
				t.Errorf("association ended: %v", a.Err())
			}
		})
	}
	t.Run("send too large", func(t *testing.T) {
		proxy := sizeRelay(t, "127.0.0.1:0")
		u := newUpstream(t, upstream.Config{Name: "exit", Host: "127.0.0.1", Port: proxy.Port(), Pipeline: true}, upstream.Options{})
		a, err := u.Associate(ctxTimeout(t))
		if err != nil {
			t.Fatalf("Associate: %v", err)
		}
		defer a.Close()
		dst := upstream.Addr{IP: netip.MustParseAddr("192.0.2.7"), Port: 7}
		if _, err := a.WriteTo(make([]byte, upstream.MaxDatagram), dst); !errors.Is(err, upstream.ErrTooLarge) {
			t.Errorf("WriteTo of %d bytes: %v; want ErrTooLarge", upstream.MaxDatagram, err)
		}
		if _, err := a.WriteTo(make([]byte, upstream.MaxDatagram-10), dst); err != nil {
			t.Errorf("WriteTo of %d bytes (what fits with the header): %v", upstream.MaxDatagram-10, err)
		}
		if a.Err() != nil {
			t.Errorf("association ended: %v", a.Err())
		}
	})
}
