package nftcap

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cagedComm is the name of the executable the caged client runs: this test binary, started
// through a hard link of that name (the kernel knows a process by its executable's file
// name, not by what it calls itself).
const (
	cagedComm = "cagedclient"
	cagedMark = 0x52434147
	clientEnv = "NFTCAP_CAGED_CLIENT"
)

// TestMain lets the test binary be the caged client: with clientEnv set to "tcp DST" or
// "udp DST" it connects (sends a datagram) and prints what came back, or "error: ...".
func TestMain(m *testing.M) {
	if req := os.Getenv(clientEnv); req != "" {
		fmt.Println(cagedClient(req))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func cagedClient(req string) string {
	network, dst, _ := strings.Cut(req, " ")
	c, err := net.DialTimeout(network, dst, time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "error: " + err.Error()
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil && n == 0 {
		return "error: " + err.Error()
	}
	return "answer: " + string(buf[:n])
}

// runCaged runs the caged client in ns and returns its line.
func runCaged(t *testing.T, ns *netns, network, dst string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), cagedComm)
	if err := os.Link(self, link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns.name, link)
	cmd.Env = append(os.Environ(), clientEnv+"="+network+" "+dst)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("caged client: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// echoServer answers each connection of ln with "echo".
func echoServer(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.ReadFull(c, make([]byte, 4))
			c.Write([]byte("echo"))
			c.Close()
		}
	}()
}

// TestCagedSockets: the sockets of a caged command are captured without Local, loopback and
// this host's addresses included: TCP reaches the listener, DNS to a loopback stub reaches
// the DNS port, UDP the transparent socket; with nobody listening all of it is refused and
// the host's services never see it; another process of the host keeps its loopback.
func TestCagedSockets(t *testing.T) {
	s := newScene(t)
	spec := udpSpec()
	spec.CagedApps, spec.CagedMark = []string{cagedComm, "slirp4netns"}, cagedMark
	s.install(t, spec)
	t.Cleanup(func() { Remove(spec.Table, WithNetNS(s.host.fd)) })
	svc := s.host.listen(t, "tcp", ":9000")
	echoServer(svc)
	svcUDP := udpService(t, s.host, 9001)
	hostDsts := []string{hostPort("127.0.0.1", 9000), hostPort("::1", 9000), hostPort(hostNet4, 9000), hostPort(hostVM6, 9000)}

	t.Run("guard", func(t *testing.T) {
		s.noLeak(t, func() {
			for _, dst := range append(hostDsts, hostPort(netAddr4, 80)) {
				if got := runCaged(t, s.host, "tcp", dst); !strings.Contains(got, "refused") {
					t.Errorf("caged tcp to %s with nobody listening: %q, want refused", dst, got)
				}
			}
			for _, dst := range []string{hostPort("127.0.0.1", 9001), hostPort("::1", 9001), hostPort("127.0.0.53", 53)} {
				if got := runCaged(t, s.host, "udp", dst); strings.HasPrefix(got, "answer") {
					t.Errorf("caged udp to %s with nobody listening: %q, want no answer", dst, got)
				}
			}
		})
		select {
		case a := <-svcUDP:
			t.Errorf("the host's udp service heard %v", a)
		default:
		}
	})

	t.Run("another process keeps its loopback", func(t *testing.T) {
		for _, dst := range hostDsts {
			c, err := s.host.dial(t, net.Dialer{}, "tcp", dst)
			if err != nil {
				t.Fatalf("dial %s: %v", dst, err)
			}
			c.Write([]byte("ping"))
			c.SetDeadline(time.Now().Add(time.Second))
			if b, err := io.ReadAll(c); string(b) != "echo" {
				t.Errorf("%s: %q, %v, want the service's echo", dst, b, err)
			}
		}
	})

	t.Run("tcp reaches the listener", func(t *testing.T) {
		ln := s.host.listen(t, "tcp", hostPort("::", listenPort))
		for _, dst := range append(hostDsts, hostPort(netAddr4, 80)) {
			got := make(chan string, 1)
			go func() { got <- runCaged(t, s.host, "tcp", dst) }()
			ac, err := accept(ln, 5*time.Second)
			if err != nil {
				t.Fatalf("caged tcp to %s: the listener got nothing: %v (client: %s)", dst, err, <-got)
			}
			od, err := OriginalDst(ac.(*net.TCPConn))
			if err != nil || od.String() != dst {
				t.Errorf("caged tcp to %s: original destination %v, %v", dst, od, err)
			}
			ac.Write([]byte("router"))
			ac.Close()
			if g := <-got; g != "answer: router" {
				t.Errorf("caged tcp to %s: %q, want the listener's answer", dst, g)
			}
		}
	})

	t.Run("dns to a loopback stub reaches the dns port", func(t *testing.T) {
		dnsSeen := udpService(t, s.host, dnsPort)
		for _, dst := range []string{hostPort("127.0.0.53", 53), hostPort("::1", 53), hostPort(netAddr4, 53)} {
			s.noLeak(t, func() {
				if got := runCaged(t, s.host, "udp", dst); got != "answer: answer" {
					t.Errorf("caged dns to %s: %q, want the dns port's answer", dst, got)
				}
			})
		}
		if len(dnsSeen) == 0 {
			t.Error("the dns port heard nothing")
		}
	})

	t.Run("udp reaches the transparent socket", func(t *testing.T) {
		seen := tproxyServer(t, s.host)
		// (not to the service's port: the reply socket could not bind beside it)
		for _, dst := range []string{hostPort("127.0.0.1", 9002), hostPort("::1", 9002), hostPort(netAddr4, 9999)} {
			s.noLeak(t, func() {
				if got := runCaged(t, s.host, "udp", dst); got != "answer: via router" {
					t.Errorf("caged udp to %s: %q, want the router's answer", dst, got)
				}
			})
			select {
			case p := <-seen:
				if p[1].String() != dst {
					t.Errorf("caged udp to %s: the router saw original destination %v", dst, p[1])
				}
			case <-time.After(time.Second):
				t.Errorf("caged udp to %s: the router saw nothing", dst)
			}
		}
		select {
		case a := <-svcUDP:
			t.Errorf("the host's udp service heard %v", a)
		default:
		}
	})
}
