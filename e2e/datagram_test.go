//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
)

// datagramSizes is the sweep: every boundary a buffer or a path has (the old 16,384-byte
// buffer and its 252-byte header room, a SOCKS5 IPv4 header's 10 bytes, the IPv4 limit).
var datagramSizes = []int{1, 2, 100, 512, 1024, 1472, 1473, 4096, 8192, 16383, 16384, 16385,
	16636, 16637, 16898, 20000, 30000, 32767, 32768, 32769, 40000, 50000, 60000, 65000, 65497, 65498,
	65500, 65507}

// sizer is one guest socket (one flow: a guest's socket per size would soon be over its
// associations per address) that asks the lab's UDP echo for answers of a given size.
type sizer struct {
	t *testing.T
	c net.Conn
}

func (s *scene) sizer(dst string) *sizer {
	s.t.Helper()
	c, err := s.lab.Guest().Dial(s.ctx, "udp", dst)
	if err != nil {
		s.t.Fatalf("dial %s from the guest: %v", dst, err)
	}
	s.t.Cleanup(func() { c.Close() })
	return &sizer{t: s.t, c: c}
}

// ask asks for an answer of size bytes, twice if none comes within wait, and returns it:
// nil when none came; a datagram that is not any size's whole answer is returned as it is
// (cut or changed). Late answers to earlier questions (whole ones of another size) are
// skipped.
func (z *sizer) ask(size int, wait time.Duration) []byte {
	z.t.Helper()
	buf := make([]byte, 70000)
	for range 2 {
		if _, err := fmt.Fprintf(z.c, "size:%d", size); err != nil {
			z.t.Fatalf("send: %v", err)
		}
		z.c.SetReadDeadline(time.Now().Add(wait))
		for {
			n, err := z.c.Read(buf)
			if err != nil {
				break
			}
			got := buf[:n]
			if n != size && bytes.Equal(got, lab.SizedAnswer(n)) {
				continue // a late answer of another size
			}
			return append([]byte(nil), got...)
		}
	}
	return nil
}

// TestUDPDatagramsNeverCut: answers of 1 to 65,507 bytes arrive at the guest whole, or not at
// all, never cut. Through go-socks5's relay (IPv4), whose datagrams carry a 10-byte header,
// 65,497 bytes is the most an answer can be (a larger one the proxy cannot send: it never
// reaches the router); sent direct by a rule, every size up to 65,507 arrives. A datagram
// from the guest that with the proxy's header is more than a UDP socket can send is
// dropped whole and counted (udp-oversize), and the flow goes on.
func TestUDPDatagramsNeverCut(t *testing.T) {
	for _, path := range []struct {
		name, extra string
		max         int // the largest answer the path carries
	}{
		{"proxy", "", 65507 - 10},
		{"direct", "direct", 65507},
	} {
		t.Run(path.name, func(t *testing.T) {
			cfg := config(lab.GoSocksUDPAddr, "")
			if path.extra == "direct" {
				cfg = strings.Replace(cfg, "[[rule]]\nname = \"vm\"", "[[rule]]\nname = \"udp-echo-direct\"\nhosts = [\"203.0.113.10\"]\nports = [7]\naction = \"direct\"\n\n[[rule]]\nname = \"vm\"", 1)
			}
			s := udpScene(t, cfg)
			z := s.sizer(lab.UDPEchoAddr)
			var whole, none, cut int
			for _, size := range datagramSizes {
				got := z.ask(size, 2*time.Second)
				switch {
				case got == nil && size <= path.max:
					t.Errorf("size %d: no answer; want it whole", size)
				case got == nil:
					none++
				case !bytes.Equal(got, lab.SizedAnswer(size)):
					cut++
					t.Errorf("size %d: an answer of %d bytes (or other bytes): the datagram was changed", size, len(got))
				default:
					whole++
				}
			}
			t.Logf("%s: %d of %d sizes arrived whole, %d (above %d bytes) not at all, %d changed", path.name, whole, len(datagramSizes), none, path.max, cut)
			if path.name != "proxy" {
				return
			}
			// Through the proxy the guest's own 65,500 bytes do not fit with the header.
			before, _ := refusalCount(s.status(), "udp-oversize")
			if _, err := z.c.Write(bytes.Repeat([]byte{'x'}, 65500)); err != nil {
				t.Fatalf("send 65,500 bytes: %v", err)
			}
			var n uint64
			var recent []control.Refused
			if !wait.Poll(5*time.Second, func() bool { n, recent = refusalCount(s.status(), "udp-oversize"); return n > before }) {
				t.Fatalf("udp-oversize refusals %d after a 65,500-byte datagram through the proxy; want %d", n, before+1)
			}
			t.Logf("udp-oversize: %d, latest %+v", n, recent[0])
			if got := z.ask(30000, 2*time.Second); !bytes.Equal(got, lab.SizedAnswer(30000)) {
				t.Errorf("after the drop, a 30,000-byte answer came as %d bytes", len(got))
			}
		})
	}
}
