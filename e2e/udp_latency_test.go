//go:build linux

package e2e

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/nftcap"
	"github.com/agentcage/router/router/upstream"
)

// TestUDPLatency measures UDP round trips to the lab's echo, paired in one run: from the
// guest through the router (capture, the router's relay, the proxy's association) and from
// the host straight through an association of the same SOCKS server (the router's own
// upstream code, a marked socket, no capture), one echo of each in turn, udpLatencyEchoes
// of each. It is a measurement, not a pass/fail test: it runs with ROUTER_UDP_LATENCY=1
// and logs p50 and p99 of both and their difference.
func TestUDPLatency(t *testing.T) {
	if os.Getenv("ROUTER_UDP_LATENCY") != "1" {
		t.Skip("a measurement: run with ROUTER_UDP_LATENCY=1 (and ROUTER_E2E=1, as root)")
	}
	const udpLatencyEchoes = 200
	for _, up := range []struct{ name, addr string }{{"go-socks5", lab.GoSocksUDPAddr}, {"dante", lab.DanteAddr}} {
		t.Run(up.name, func(t *testing.T) {
			s := udpScene(t, config(up.addr, ""))
			viaRouter, err := s.lab.Guest().Dial(s.ctx, "udp", lab.UDPEchoAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer viaRouter.Close()
			host, port, _ := strings.Cut(up.addr, ":")
			p, _ := strconv.Atoi(port)
			u, err := upstream.New(upstream.Config{Name: "straight", Host: host, Port: uint16(p)}, upstream.Options{
				Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
					var c net.Conn
					err := s.lab.Host().Do(func() (err error) {
						d := net.Dialer{Control: nftcap.MarkControl(conf.DefaultMark)}
						c, err = d.DialContext(ctx, network, address)
						return err
					})
					return c, err
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			a, err := u.Associate(s.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			echo := upstream.Addr{IP: netip.MustParseAddr(lab.ServiceAddr), Port: 7}
			payload := []byte("0123456789abcdef0123456789abcdef")
			buf := make([]byte, 2048)
			router := func() time.Duration {
				start := time.Now()
				viaRouter.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := viaRouter.Write(payload); err != nil {
					t.Fatal(err)
				}
				if _, err := viaRouter.Read(buf); err != nil {
					t.Fatalf("echo through the router: %v", err)
				}
				return time.Since(start)
			}
			straight := func() time.Duration {
				start := time.Now()
				if _, err := a.WriteTo(payload, echo); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { _, _, err := a.ReadFrom(buf); done <- err }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("echo straight through the proxy: %v", err)
					}
				case <-time.After(2 * time.Second):
					t.Fatal("echo straight through the proxy: no answer")
				}
				return time.Since(start)
			}
			for range 10 { // warm up: associations, caches
				router()
				straight()
			}
			var rs, ss []time.Duration
			for range udpLatencyEchoes {
				rs = append(rs, router())
				ss = append(ss, straight())
			}
			slices.Sort(rs)
			slices.Sort(ss)
			pct := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
			t.Logf("%s, %d echoes each: through the router p50 %v p99 %v; straight to the SOCKS server p50 %v p99 %v; added p50 %v p99 %v",
				up.name, udpLatencyEchoes, pct(rs, .5), pct(rs, .99), pct(ss, .5), pct(ss, .99),
				pct(rs, .5)-pct(ss, .5), pct(rs, .99)-pct(ss, .99))
			s.wantNoLeak("latency run")
		})
	}
}
