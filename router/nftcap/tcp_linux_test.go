package nftcap

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func tcpTProxySpec() Spec {
	s := sceneSpec()
	s.TCPTProxy, s.UDPMark, s.UDPTable = true, udpTestMark, udpTable
	return s
}

// listenTransparent opens the router's listener as the daemon does with TCPTProxy:
// [::]:listenPort, marked, IP_TRANSPARENT (TransparentControl).
func listenTransparent(t *testing.T, ns *netns) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	lc := net.ListenConfig{Control: TransparentControl(testMark)}
	ns.do(t, func() { ln, err = lc.Listen(context.Background(), "tcp", hostPort("::", listenPort)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestVMCaptureTCPTProxy plays the VM side of the TCP capture by TPROXY: handed over
// unchanged to a transparent listener, redirected otherwise, refused with nobody listening,
// and the listener's port still closed to direct connections.
func TestVMCaptureTCPTProxy(t *testing.T) {
	s := newScene(t)
	s.install(t, tcpTProxySpec())
	netTCP := s.net.listen(t, "tcp", ":80")

	t.Run("handed over", func(t *testing.T) {
		ln := listenTransparent(t, s.host)
		for _, tc := range []struct {
			name, dst, from string
			natted          bool // redirected rather than handed over
		}{
			{"ipv4", hostPort(netAddr4, 80), vmAddr4, false},
			{"ipv6", hostPort(netAddr6, 443), vmAddr6, false},
			{"ipv4 outside every known network", "203.0.113.7:22", vmAddr4, false},
			{"ipv4 to the listener's port", hostPort(netAddr4, listenPort), vmAddr4, true},
			{"ipv6 to the listener's port", hostPort(netAddr6, listenPort), vmAddr6, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.noLeak(t, func() {
					local := make(chan netip.AddrPort, 1)
					go func() {
						// expectRedirected accepts the connection; peek at it first.
						c, err := accept(ln, 2*time.Second)
						if err != nil {
							local <- netip.AddrPort{}
							return
						}
						local <- c.LocalAddr().(*net.TCPAddr).AddrPort()
						c.Close()
					}()
					c, err := s.vm.dial(t, net.Dialer{}, "tcp", tc.dst)
					if err != nil {
						t.Fatalf("dial %s: %v", tc.dst, err)
					}
					c.Close()
					got := <-local
					got = netip.AddrPortFrom(got.Addr().Unmap(), got.Port())
					if handed := got == netip.MustParseAddrPort(tc.dst); handed == tc.natted {
						t.Errorf("accepted with local address %v (dst %s), want handed over: %v", got, tc.dst, !tc.natted)
					}
					expectRedirected(t, s.vm, net.Dialer{}, ln, tc.dst, tc.from)
				})
			})
		}
		expectNoAccept(t, netTCP)
	})

	t.Run("listener port closed to direct connections", func(t *testing.T) {
		ln := listenTransparent(t, s.host)
		s.noLeak(t, func() {
			expectRefused(t, s.vm, net.Dialer{}, hostPort(hostVM4, listenPort))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(hostVM6, listenPort))
		})
		expectNoAccept(t, ln)
	})

	t.Run("plain listener: redirected", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		s.noLeak(t, func() { expectRedirected(t, s.vm, net.Dialer{}, ln, hostPort(netAddr4, 80), vmAddr4) })
	})

	t.Run("nobody listening: refused", func(t *testing.T) {
		s.noLeak(t, func() {
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr4, 80))
			expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr6, 443))
		})
	})

	t.Run("spoofed source", func(t *testing.T) {
		ln := listenTransparent(t, s.host)
		s.vm.ip(t, "addr", "add", "192.0.2.99/32", "dev", "vm0")
		defer s.vm.ip(t, "addr", "del", "192.0.2.99/32", "dev", "vm0")
		s.noLeak(t, func() { expectNoConnect(t, s.vm, from("192.0.2.99"), hostPort(netAddr4, 80)) })
		expectNoAccept(t, ln)
	})
}

// TestTCPCaptureCost measures what the kernel spends on a captured connection, redirect
// against TPROXY, with nothing else in the way: the scene's VM connects to a remote address
// (captured) and the host's transparent listener answers 1 KiB and closes, 8 clients at a
// time. Each round runs every variant once (in reverse order every other round) and prints
// connections per second and the CPU per connection of this process (ownCPU) and of the
// machine (/proc/stat); the ratios, of this process's CPU, are taken within a round. A measurement, not a
// check: NFTCAP_COST=ROUNDS runs it (ROUTER_E2E=1 too); NFTCAP_COST_ONLY=redirect (or
// tproxy) runs that variant alone, for a profiler.
func TestTCPCaptureCost(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("NFTCAP_COST"))
	if rounds <= 0 {
		t.Skip("a measurement: NFTCAP_COST=ROUNDS runs it")
	}
	const conns, clients = 20000, 8
	s := newScene(t)
	s.vm.sysctl(t, "net.ipv4.ip_local_port_range=10000 65000")
	ln := listenTransparent(t, s.host)
	go func() {
		answer := make([]byte, 1024)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				if _, err := io.ReadFull(c, buf); err == nil {
					c.Write(answer)
				}
			}()
		}
	}()
	redirect := tcpTProxySpec()
	redirect.TCPTProxy = false
	variants := []struct {
		name string
		spec Spec
	}{{"redirect", redirect}, {"tproxy", tcpTProxySpec()}}
	type figure struct{ rate, cpu float64 }
	got := make([][]figure, len(variants))
	for r := range rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			if only := os.Getenv("NFTCAP_COST_ONLY"); only != "" && only != variants[i].name {
				got[i] = append(got[i], figure{1, 1})
				continue
			}
			s.install(t, variants[i].spec)
			time.Sleep(200 * time.Millisecond) // not ordering: a pause between measured rounds, so the last one's teardown weighs not on this one
			busy0, own0, start := machineBusy(t), ownCPU(t), time.Now()
			runClients(t, s.vm, hostPort(netAddr4, 80), clients, conns/clients)
			wall, busy, own := time.Since(start), machineBusy(t)-busy0, ownCPU(t)-own0
			f := figure{float64(conns) / wall.Seconds(), own.Seconds() * 1e6 / conns}
			got[i] = append(got[i], f)
			t.Logf("round %d %-8s %6.0f conn/s  this process %5.1f µs/conn  machine %5.1f µs/conn", r+1, variants[i].name,
				f.rate, f.cpu, busy.Seconds()*1e6/conns)
		}
	}
	if os.Getenv("NFTCAP_COST_ONLY") != "" {
		return // no pairs
	}
	var rate, cpu []float64
	for r := range rounds {
		rate = append(rate, got[1][r].rate/got[0][r].rate)
		cpu = append(cpu, got[1][r].cpu/got[0][r].cpu)
	}
	slices.Sort(rate)
	slices.Sort(cpu)
	t.Logf("tproxy ÷ redirect, median (min–max) of %d rounds: conn/s %.3f (%.3f–%.3f), this process's CPU µs/conn %.3f (%.3f–%.3f)",
		rounds, rate[rounds/2], rate[0], rate[rounds-1], cpu[rounds/2], cpu[0], cpu[rounds-1])
}

// runClients opens n connections from each of k clients in ns to dst, one after another:
// 64 bytes out, the answer read to its end.
func runClients(t *testing.T, ns *netns, dst string, k, n int) {
	t.Helper()
	errs := make(chan error, k)
	for range k {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
				errs <- err
				return
			}
			req := make([]byte, 64)
			for range n {
				c, err := net.Dial("tcp", dst)
				if err != nil {
					errs <- err
					return
				}
				c.Write(req)
				_, err = io.Copy(io.Discard, c)
				c.Close()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range k {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// ownCPU is this process's CPU time so far (user and system, every thread): the clients,
// the listener and the kernel's work on their packets (veth delivers them in the sender's
// context), without what the machine's other processes do meanwhile.
func ownCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy is the busy time of every CPU so far: user, nice, system, irq, softirq and
// steal of /proc/stat's "cpu" line.
func machineBusy(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}
