//go:build linux

package e2e

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
)

// TestDNSUnansweredNamesOfOneGuest: in proxy mode one guest asks, from 20 of its addresses,
// 20 names a second that are never answered (lab.SilentZone), for 4 s: each holds an
// upstream connection until the router's timeout. The second guest's queries meanwhile
// are answered at once: p99 under 100 ms. Before, the flood took every upstream connection
// and the other guests' queries timed out.
func TestDNSUnansweredNamesOfOneGuest(t *testing.T) {
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, "mode = \"proxy\"\nproxy = \"exit\"\n"))
	guest2 := s.secondGuest()
	s.startRouter()
	server := lab.ServiceAddr + ":53"
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	for i := range 20 {
		a := fmt.Sprintf("10.0.2.%d", 150+i)
		if out, code := run(s.ctx, s.lab.Guest(), "ip", "addr", "add", a+"/24", "dev", lab.GuestDev); code != 0 {
			t.Fatalf("ip addr add %s: exit %d, %s", a, code, out)
		}
		c, err := s.lab.Guest().DialFrom(s.ctx, "udp", a, server)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	stop := make(chan struct{})
	flooded := make(chan int)
	go func() {
		n := 0
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("n%d.%s", n, lab.SilentZone), dns.TypeA)
			if b, err := m.Pack(); err == nil {
				flood[n%len(flood)].Write(b)
			}
			n++
			select {
			case <-tk.C:
			case <-stop:
				flooded <- n
				return
			}
		}
	}()
	// The flood holds what it can: its share of the router's upstream connections when alone
	// (12 of 16), each held by one of its queries at the lab resolver, which never answers.
	wait.For(t, "the flood holding its share of the upstream", 10*time.Second, func() bool {
		n := 0
		for _, q := range s.lab.DNSLog() {
			if dns.IsSubDomain(lab.SilentZone, q.Name) {
				n++
			}
		}
		return n >= 12
	})

	c, err := guest2.Dial(s.ctx, "udp", server)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var delays []time.Duration
	buf := make([]byte, 4096)
	for i := range 60 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("q%d.lab.test.", i), dns.TypeA) // NXDOMAIN, not cached
		b, _ := m.Pack()
		start := time.Now()
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		d := time.Hour // no answer: worse than any delay
		for {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			r := new(dns.Msg)
			if r.Unpack(buf[:n]) == nil && r.Id == m.Id {
				d = time.Since(start)
				break
			}
		}
		delays = append(delays, d)
		time.Sleep(40 * time.Millisecond) // not ordering: the second guest's queries paced
	}
	close(stop)
	n := <-flooded
	slices.Sort(delays)
	p50, p99 := delays[len(delays)/2], delays[len(delays)*99/100]
	t.Logf("a flood of %d unanswered names from 20 addresses of one guest; the second guest's %d queries: p50 %v, p99 %v", n, len(delays), p50, p99)
	if p99 > 100*time.Millisecond {
		t.Errorf("the second guest's queries: p99 %v; want at most 100 ms", p99)
	}
}
