package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

// ErrClosed is returned by the socket helpers of a Netns whose Lab has been closed.
var ErrClosed = errors.New("lab: namespace closed")

// Netns is one of the lab's network namespaces. Its methods are safe for concurrent use.
// After the Lab is closed, the socket helpers return ErrClosed and commands fail (the
// namespace no longer exists); sockets created earlier keep working until their owner closes
// them.
type Netns struct {
	name       string
	runTimeout time.Duration

	mu   sync.RWMutex // guards fd and home; held (read) for the whole of a Do
	fd   int          // open handle on /run/netns/<name>; -1 once closed
	home int          // open handle on the process's own namespace; -1 once closed
}

func newNetns(name string, runTimeout time.Duration) (*Netns, error) {
	fd, home, err := openNetns(name)
	if err != nil {
		return nil, err
	}
	return &Netns{name: name, runTimeout: runTimeout, fd: fd, home: home}, nil
}

// Name is the namespace's name, as `ip netns list` shows it.
func (n *Netns) Name() string { return n.name }

func (n *Netns) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		return nil
	}
	err := errors.Join(closeFD(n.fd), closeFD(n.home))
	n.fd, n.home = -1, -1
	if err != nil {
		return fmt.Errorf("close namespace handle %s: %w", n.name, err)
	}
	return nil
}

// Do runs fn on an OS thread switched into the namespace, and switches the thread back
// afterwards. Sockets fn creates belong to the namespace for their whole life. fn must not
// resolve host names nor hand socket creation to other goroutines: those run on other threads,
// in the process's own namespace. fn must not call Do of the same Netns (Close waits for
// running Do calls; a nested one could deadlock behind it). If the thread cannot be switched back, it stays locked to a
// goroutine that then exits, so the Go runtime discards the thread; the error says so.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		n.mu.RLock()
		defer n.mu.RUnlock()
		if n.fd < 0 {
			errc <- ErrClosed
			return
		}
		runtime.LockOSThread()
		if err := setns(n.fd); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", n.name, err)
			return
		}
		ferr := fn()
		if err := setns(n.home); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leave namespace %s (thread discarded): %w", n.name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Listen opens a listener inside the namespace. The host part of address must be empty or a
// literal IP (no name resolution). ListenPacket and Dial accept the "ip4:icmp"-style networks
// too, with a bare IP as address.
func (n *Netns) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	if err := literalAddress(network, address, true); err != nil {
		return nil, fmt.Errorf("listen %s %s in %s: %w", network, address, n.name, err)
	}
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s %s in %s: %w", network, address, n.name, err)
	}
	return ln, nil
}

// ListenPacket opens a packet socket inside the namespace; address as for Listen.
func (n *Netns) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	if err := literalAddress(network, address, true); err != nil {
		return nil, fmt.Errorf("listen %s %s in %s: %w", network, address, n.name, err)
	}
	var pc net.PacketConn
	err := n.Do(func() error {
		var err error
		pc, err = (&net.ListenConfig{}).ListenPacket(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s %s in %s: %w", network, address, n.name, err)
	}
	return pc, nil
}

// Dial connects from inside the namespace. address must be a literal IP and port; ctx bounds
// the connect only.
func (n *Netns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return n.DialFrom(ctx, network, "", address)
}

// DialFrom is Dial with the local IP fixed to localIP (a literal IP; "" lets the kernel
// choose).
func (n *Netns) DialFrom(ctx context.Context, network, localIP, address string) (net.Conn, error) {
	if err := literalAddress(network, address, false); err != nil {
		return nil, fmt.Errorf("dial %s %s in %s: %w", network, address, n.name, err)
	}
	d := &net.Dialer{}
	if localIP != "" {
		ip, err := netip.ParseAddr(localIP)
		if err != nil {
			return nil, fmt.Errorf("dial %s %s in %s: local address: %w", network, address, n.name, err)
		}
		switch {
		case strings.HasPrefix(network, "tcp"):
			d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice()}
		case strings.HasPrefix(network, "udp"):
			d.LocalAddr = &net.UDPAddr{IP: ip.AsSlice()}
		default:
			return nil, fmt.Errorf("dial %s %s in %s: local address on unsupported network", network, address, n.name)
		}
	}
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s %s in %s: %w", network, address, n.name, err)
	}
	return c, nil
}

// literalAddress refuses host names, which would be resolved on other threads, outside the
// namespace.
func literalAddress(network, address string, emptyHostOK bool) error {
	host := address
	if !strings.HasPrefix(network, "ip") { // "ip4:icmp" and the like take a bare address
		var err error
		if host, _, err = net.SplitHostPort(address); err != nil {
			return err
		}
	}
	if host == "" && emptyHostOK {
		return nil
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("host %q is not a literal IP address", host)
	}
	return nil
}

// Command prepares name with args to run inside the namespace through `ip netns exec`, so
// /etc/netns/<name>/resolv.conf replaces /etc/resolv.conf. ctx kills the process (the Cmd's
// WaitDelay is 2 s). The caller owns the Cmd: it starts it, waits for it, and ends it.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// Run runs name with args inside the namespace and returns its combined output. It gives up
// after the lab's RunTimeout (or ctx, whichever ends first). The error names the namespace and
// the command and carries the start of the output.
func (n *Netns) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.runTimeout)
	defer cancel()
	cmd := n.Command(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("in %s: %s: %w%s", n.name, strings.Join(append([]string{name}, args...), " "), err, outputTail(out))
	}
	return out, nil
}

// runCmd runs a command in the process's own namespace with stdin, bounded by timeout.
func runCmd(ctx context.Context, timeout time.Duration, stdin string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 2 * time.Second
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w%s", strings.Join(append([]string{name}, args...), " "), err, outputTail(out.Bytes()))
	}
	return out.Bytes(), nil
}

func outputTail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return ""
	}
	const max = 2000
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return "\n" + s
}
