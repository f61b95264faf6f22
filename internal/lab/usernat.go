package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// User-space NATs (AddUserNATGuest): a guest namespace of its own whose only link is the tap
// of a NAT process running in the host namespace, as QEMU's -nic user, libvirt's session
// mode, GNOME Boxes and rootless containers have it. The guest's traffic leaves from the NAT
// process's own sockets, with the host's addresses; its gateway leads to the host's loopback.
const (
	Slirp4netns = "slirp4netns" // libslirp's slirp4netns: guest 10.0.2.100, gateway 10.0.2.2
	Pasta       = "pasta"       // passt's pasta: the guest copies the host's uplink addresses
)

// UserNAT is a guest behind a user-space NAT process.
type UserNAT struct {
	Kind  string
	Guest *Netns
	// Gateway and Gateway6 are the guest's addresses for the host's loopback (127.0.0.1 and
	// ::1); Gateway6 is "" when the NAT offers no IPv6. DNS is the NAT's resolver for the
	// guest, which it forwards to the host's resolver (the host namespace's resolv.conf).
	Gateway, Gateway6, DNS string
	Proc                   *Process
}

// Addresses of the pasta guest's resolver (forwarded by pasta to the host's resolver).
const pastaDNS = "198.51.100.53"

// AddUserNATGuest makes a guest namespace ("<id>-<kind>") behind a NAT process of kind
// (Slirp4netns or Pasta) started in the host namespace, and waits until the guest's link is
// configured. The NAT reads the host namespace's resolv.conf when it starts (see
// UseStubResolver). The lab's Close ends the process (by PID) and removes the namespace.
func (l *Lab) AddUserNATGuest(ctx context.Context, kind string) (*UserNAT, error) {
	name := l.id + "-" + kind
	ns, err := l.addNamespace(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%s guest: %w", kind, err)
	}
	if err := l.run(ctx, "", "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return nil, fmt.Errorf("%s guest: %w", kind, err)
	}
	u := &UserNAT{Kind: kind, Guest: ns}
	var args []string
	var dev, want string
	switch kind {
	case Slirp4netns:
		u.Gateway, u.Gateway6, u.DNS = "10.0.2.2", "fd00::2", "10.0.2.3"
		dev, want = "tap0", "10.0.2.100"
		args = []string{"slirp4netns", "--configure", "--mtu=65520", "--enable-ipv6", "--netns-type=path", filepath.Join(netnsRunDir, name), dev}
	case Pasta:
		u.Gateway, u.Gateway6, u.DNS = InetUplinkAddr, InetUplinkAddr6, pastaDNS
		dev, want = HostUplinkDev, HostUplinkAddr
		// As root pasta would change to nobody, who may not enter the namespace.
		args = []string{"pasta", "--runas", "0", "--netns", filepath.Join(netnsRunDir, name), "--netns-only",
			"--config-net", "--foreground", "--dns-forward", pastaDNS}
	default:
		return nil, fmt.Errorf("user-space nat %q: unknown", kind)
	}
	resolv := fmt.Sprintf("# written by the router lab\nnameserver %s\noptions timeout:2 attempts:2\n", u.DNS)
	if err := os.WriteFile(filepath.Join(etcNetnsDir, name, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return nil, fmt.Errorf("%s guest: resolver: %w", kind, err)
	}
	p, err := StartProcess(kind, l.host.Command(context.Background(), args[0], args[1:]...))
	if err != nil {
		return nil, fmt.Errorf("%s guest: %w", kind, err)
	}
	u.Proc = p
	l.addUndo(func() error { return p.Stop(2 * time.Second) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := runCmd(ctx, l.runTimeout, "", "ip", "-n", name, "addr", "show", "dev", dev)
		if strings.Contains(string(out), "inet "+want+"/") && strings.Contains(string(out), "UP") {
			break
		}
		if exited, _ := p.Exited(); exited || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s guest: no address %s on %s: %s\n%s", kind, want, dev, out, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.logf("lab %s: %s guest %s (gateway %s, dns %s)", l.id, kind, name, u.Gateway, u.DNS)
	return u, nil
}

// StubResolverAddr is where UseStubResolver's stub listens, as systemd-resolved's does.
const StubResolverAddr = "127.0.0.53:53"

// UseStubResolver makes the host namespace's resolver a loopback stub, as systemd-resolved
// is: a forwarder on StubResolverAddr (UDP) that sends each query on to the lab DNS from the
// host's own socket, and a resolv.conf naming it. Call it before the processes that must read
// it start. The stub ends with the lab.
func (l *Lab) UseStubResolver(ctx context.Context) error {
	pc, err := l.host.ListenPacket(ctx, "udp4", StubResolverAddr)
	if err != nil {
		return fmt.Errorf("stub resolver: %w", err)
	}
	l.addUndo(pc.Close)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := append([]byte(nil), buf[:n]...)
			go func() {
				c, err := l.host.Dial(context.Background(), "udp", DNSAddr)
				if err != nil {
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(3 * time.Second))
				if _, err := c.Write(q); err != nil {
					return
				}
				ans := make([]byte, 4096)
				m, err := c.Read(ans)
				if err != nil && !errors.Is(err, net.ErrClosed) {
					return
				}
				pc.WriteTo(ans[:m], from)
			}()
		}
	}()
	resolv := "# written by the router lab: a loopback stub, as systemd-resolved's\nnameserver 127.0.0.53\noptions timeout:2 attempts:2\n"
	if err := os.WriteFile(filepath.Join(etcNetnsDir, l.host.name, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return fmt.Errorf("stub resolver: resolv.conf: %w", err)
	}
	return nil
}
