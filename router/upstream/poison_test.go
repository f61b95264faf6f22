package upstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/agentcage/router/router/upstream"
)

// answering is a proxy on 127.0.0.1:0 that answers every CONNECT with one failure: a
// SOCKS5 reply code (socks > 0) or an HTTP status line.
func answering(t *testing.T, socks byte, status int) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if socks > 0 {
					b := make([]byte, 3)
					if _, err := io.ReadFull(c, b); err != nil { // greeting: 5, 1, no auth
						return
					}
					_, _ = c.Write([]byte{5, 0})
					h := make([]byte, 4)
					if _, err := io.ReadFull(c, h); err != nil {
						return
					}
					var n int
					switch h[3] {
					case 1:
						n = 4
					case 4:
						n = 16
					case 3:
						l := make([]byte, 1)
						if _, err := io.ReadFull(c, l); err != nil {
							return
						}
						n = int(l[0])
					}
					if _, err := io.ReadFull(c, make([]byte, n+2)); err != nil {
						return
					}
					_, _ = c.Write([]byte{5, socks, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n", status, http.StatusText(status))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestGuestCannotPoisonHealth: a proxy's answer that the destination is unreachable (SOCKS5
// REP X'02' to X'08', HTTP 403 or any 5xx to CONNECT) is the destination's failure: the
// error says Refused, the upstream stays up however many a guest provokes (an IPv6
// literal gets dante's 0x08, tinyproxy answers 500 for an unreachable port). A general
// failure, refused credentials or no answer still mark it down.
func TestGuestCannotPoisonHealth(t *testing.T) {
	type tc struct {
		name    string
		socks   byte
		status  int
		refused bool
	}
	cases := []tc{{"socks 0x01 general failure", 1, 0, false}}
	for code := byte(2); code <= 8; code++ {
		cases = append(cases, tc{fmt.Sprintf("socks 0x%02x", code), code, 0, true})
	}
	for _, st := range []int{403, 500, 501, 502, 503, 504, 505, 511} {
		cases = append(cases, tc{fmt.Sprintf("http %d", st), 0, st, true})
	}
	cases = append(cases, tc{"http 400", 0, 400, false}, tc{"http 407", 0, 407, false})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := answering(t, c.socks, c.status)
			cfg := upstream.Config{Name: "exit", Host: "127.0.0.1", Port: port}
			if c.socks == 0 {
				cfg.Type = upstream.HTTP
			}
			tr := mustTrack(t, newUpstream(t, cfg, upstream.Options{}), upstream.HealthConfig{Backoff: time.Minute})
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := tr.Connect(ctx, upstream.Addr{Name: "unreachable.example", Port: 9}, nil)
				cancel()
				var ue *upstream.Error
				if !errors.As(err, &ue) || ue.Refused != c.refused {
					t.Fatalf("Connect: %v; want an *Error with Refused=%v", err, c.refused)
				}
			}
			want := upstream.Up
			if !c.refused {
				want = upstream.Down
			}
			if s := tr.Status(); s.State != want {
				t.Errorf("after 3 such answers the upstream is %v; want %v", s.State, want)
			}
		})
	}
}
