//go:build linux

package e2e

import (
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/nftcap"
)

// guestLoad sends, from inside the guest, a TCP SYN (a non-blocking connect, closed at
// once) and a UDP datagram to the internet's echo address, and a SYN to the host's port
// 2222, every millisecond, until stop is closed or limit passes. It returns how many
// rounds it sent.
func guestLoad(guest *lab.Netns, stop <-chan struct{}, limit time.Duration) (sent int, err error) {
	dst := netip.MustParseAddrPort(lab.UDPEchoAddr).Addr().As4()
	gw := netip.MustParseAddr(lab.GatewayAddr).As4()
	err = guest.Do(func() error {
		udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(udp)
		host := -1
		defer func() {
			if host >= 0 {
				unix.Close(host)
			}
		}()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		end := time.After(limit)
		for {
			select {
			case <-stop:
				return nil
			case <-end:
				return errors.New("the load ran past its limit")
			case <-tick.C:
			}
			// UDP; a full socket buffer (EAGAIN) only skips a datagram.
			_ = unix.Sendto(udp, []byte("leak?"), 0, &unix.SockaddrInet4{Port: 7, Addr: dst})
			s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := unix.Connect(s, &unix.SockaddrInet4{Port: 80, Addr: dst}); err != nil && !errors.Is(err, unix.EINPROGRESS) {
				unix.Close(s)
				return err
			}
			unix.Close(s)
			// The host's own service: off limits, also while the table is missing. Kept
			// open until the next round, so that a connection the host accepts is
			// established (and counted) before it is closed.
			if host >= 0 {
				unix.Close(host)
			}
			if host, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
				return err
			}
			if err := unix.Connect(host, &unix.SockaddrInet4{Port: 2222, Addr: gw}); err != nil && !errors.Is(err, unix.EINPROGRESS) {
				return err
			}
			sent++
		}
	})
	return sent, err
}

// TestFlushNoWindow: `nft flush ruleset` (what a reload of the nftables service or of
// firewalld runs) takes the router's table away, and the router puts it back within tens of
// milliseconds; meanwhile the guest's traffic must not be forwarded, nor reach the host. A
// guest sends SYNs and UDP datagrams out and a SYN to a host service every millisecond
// while the ruleset is flushed 100 times, each time waiting for the table to come back:
// the uplink's leak counter stays at 0 and the host's service is never reached.
func TestFlushNoWindow(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("before: exit %d, %q; want the proxy's exit address", code, out)
	}
	hostSvc := s.tcpService(s.lab.Host(), ":2222", "HTTP/1.0 200 OK\r\n\r\nhost service\n")
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var sent atomic.Int64
	loadErr := make(chan error, 1)
	go func() {
		n, err := guestLoad(s.lab.Guest(), stop, 2*time.Minute)
		sent.Store(int64(n))
		loadErr <- err
	}()
	const flushes = 100
	var slowest time.Duration
	for i := range flushes {
		cmd := s.lab.Host().Command(s.ctx, "nft", "flush", "ruleset")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			close(stop)
			t.Fatalf("flush %d: %v\n%s", i, err, out)
		}
		took := s.tableBack(start, 3*time.Second)
		if took == 0 {
			close(stop)
			t.Fatalf("flush %d: the table was not back within 3 s", i)
		}
		slowest = max(slowest, took)
	}
	close(stop)
	if err := <-loadErr; err != nil {
		t.Fatalf("guest load: %v", err)
	}
	if sent.Load() < flushes {
		t.Fatalf("the guest sent %d rounds during %d flushes; the load did not run", sent.Load(), flushes)
	}
	t.Logf("%d flushes, the table back after %v at the slowest; the guest sent %d SYNs and %d datagrams", flushes, slowest, sent.Load(), sent.Load())
	s.wantNoLeak("flushes under load")
	if n := hostSvc.Load(); n != 0 {
		t.Errorf("the guest reached the host's service on :2222 %d times during the flushes", n)
	}
	// The guest is still caged and served after the flushes.
	s.lab.ResetLogs()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("after: exit %d, %q; want the proxy's exit address", code, out)
	}
}

// tableThere reports whether the inet table name exists in the host namespace.
func (s *scene) tableThere(name string) bool {
	s.t.Helper()
	var ok bool
	var err error
	if derr := s.lab.Host().Do(func() error { ok, err = nftcap.Installed(name); return nil }); derr != nil {
		s.t.Fatal(derr)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return ok
}

// TestHoldTableAfterKill: the router dies by SIGKILL: its table and the hold table stay, and
// the guest still does not get out; a new router starts over them (adopting the hold
// table), and once it is stopped `router cleanup` removes both.
func TestHoldTableAfterKill(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	hold := nftcap.HoldTable("router")
	if !s.tableThere("router") || !s.tableThere(hold) {
		t.Fatal("the router runs without its table or its hold table")
	}
	s.stopRouter(syscall.SIGKILL)
	if !s.tableThere("router") || !s.tableThere(hold) {
		t.Fatal("a table went with the killed router")
	}
	if err := s.lab.ResetLeaks(s.ctx); err != nil {
		t.Fatal(err)
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code == 0 {
		t.Errorf("the guest got out after the router was killed: %q", out)
	}
	s.wantNoLeak("after SIGKILL")
	s.startRouter()
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("after a restart over the tables: exit %d, %q; want the proxy's exit address", code, out)
	}
	s.stopRouter(syscall.SIGTERM)
	if out, code := s.routerCmd("cleanup", "--config", s.cfg); code != 0 {
		t.Fatalf("router cleanup: exit %d\n%s", code, out)
	}
	if s.tableThere("router") || s.tableThere(hold) {
		t.Error("router cleanup left a table")
	}
}
