package nftcap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/roottest"
)

// Privileged test helpers: network namespaces made with `ip netns add`, removed in
// t.Cleanup, and sockets opened inside them from this process (a goroutine locked to an OS
// thread that enters the namespace; the thread is discarded afterwards).

// nsSeq makes namespace names unique within this test process.
var nsSeq atomic.Int32

type netns struct {
	name string
	fd   int // open /run/netns/<name>
}

// newNetNS creates a namespace with lo up, or fails the test.
func newNetNS(t *testing.T, role string) *netns {
	t.Helper()
	roottest.Require(t, "ip", "nft") // skips without ROUTER_E2E=1, fails when it cannot run
	name := fmt.Sprintf("nftcap%d-%d-%s", os.Getpid(), nsSeq.Add(1), role)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	n := &netns{name: name, fd: fd}
	n.ip(t, "link", "set", "lo", "up")
	return n
}

// run runs a command and fails the test on error, returning its output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ip runs `ip -n <ns> args...`.
func (n *netns) ip(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"-n", n.name}, args...)...)
}

// exec runs a command inside the namespace.
func (n *netns) exec(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", n.name}, args...)...)
}

// nft feeds a ruleset to `nft -f -` inside the namespace.
func (n *netns) nft(t *testing.T, ruleset string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", n.name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f in %s: %v\n%s\n%s", n.name, err, out, ruleset)
	}
}

// sysctl sets a sysctl inside the namespace.
func (n *netns) sysctl(t *testing.T, kv ...string) {
	t.Helper()
	for _, s := range kv {
		n.exec(t, "sysctl", "-q", "-w", s)
	}
}

// do runs fn on an OS thread that has entered the namespace. Sockets created by fn stay in
// the namespace and may be used from any goroutine afterwards.
func (n *netns) do(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine exits locked, so the runtime discards the thread
		// and nothing else ever runs in this namespace by accident.
		runtime.LockOSThread()
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// listen opens a listener inside the namespace and closes it in t.Cleanup.
func (n *netns) listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	n.do(t, func() { ln, err = net.Listen(network, addr) })
	if err != nil {
		t.Fatalf("listen %s %s in %s: %v", network, addr, n.name, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// listenPacket opens a packet socket inside the namespace and closes it in t.Cleanup.
func (n *netns) listenPacket(t *testing.T, network, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	var err error
	n.do(t, func() { pc, err = net.ListenPacket(network, addr) })
	if err != nil {
		t.Fatalf("listen %s %s in %s: %v", network, addr, n.name, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// dial connects from inside the namespace with d (its Timeout is set when zero).
func (n *netns) dial(t *testing.T, d net.Dialer, network, addr string) (net.Conn, error) {
	t.Helper()
	if d.Timeout == 0 {
		d.Timeout = 2 * time.Second
	}
	var c net.Conn
	var err error
	n.do(t, func() { c, err = d.Dial(network, addr) })
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// veth links two namespaces: ifA in a, ifB in b, both up.
func veth(t *testing.T, a *netns, ifA string, b *netns, ifB string) {
	t.Helper()
	a.ip(t, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.name)
	a.ip(t, "link", "set", ifA, "up")
	b.ip(t, "link", "set", ifB, "up")
}

// isRefused reports whether err is a refused connection (TCP RST).
func isRefused(err error) bool { return err != nil && errors.Is(err, syscall.ECONNREFUSED) }
