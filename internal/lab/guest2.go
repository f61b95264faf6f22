package lab

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// A second guest, made by AddSecondGuest: a namespace of its own ("<id>-guest2") behind a
// VM-facing link of its own on the host, like a second VM, or a hypervisor network started
// after the router. It is another source for the router (its own address, its own
// interface); the hypervisor's NAT takes it out like the first.
const (
	SecondHostDev      = "vmnet2" // host, towards the second guest
	SecondGatewayAddr  = "10.0.4.1"
	SecondGuestAddr    = "10.0.4.15"
	SecondGuestNetwork = "10.0.4.0/24"
)

// AddSecondGuest makes the second guest and returns its namespace (its interface is
// GuestDev, its default route via SecondGatewayAddr). The lab's Close removes it. Call it
// once.
func (l *Lab) AddSecondGuest(ctx context.Context) (*Netns, error) {
	name := l.id + "-guest2"
	ns, err := l.addNamespace(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("second guest: %w", err)
	}
	batches := []struct {
		ns   string
		cmds string
	}{
		{l.host.name, fmt.Sprintf("link add %s type veth peer name %s netns %s\naddr add %s/24 dev %s\nlink set %s up\n",
			SecondHostDev, GuestDev, name, SecondGatewayAddr, SecondHostDev, SecondHostDev)},
		{name, fmt.Sprintf("link set lo up\naddr add %s/24 dev %s\nlink set %s up\nroute add default via %s\n",
			SecondGuestAddr, GuestDev, GuestDev, SecondGatewayAddr)},
	}
	for _, b := range batches {
		if err := l.run(ctx, b.cmds, "ip", "-n", b.ns, "-batch", "-"); err != nil {
			return nil, fmt.Errorf("second guest: wire namespace %s: %w", b.ns, err)
		}
	}
	if err := ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("1024 65000"), 0o644)
	}); err != nil {
		return nil, fmt.Errorf("second guest: %w", err)
	}
	l.logf("lab %s: second guest %s (%s) behind %s", l.id, name, SecondGuestAddr, SecondHostDev)
	return ns, nil
}

var linkLocalRE = regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+)/64 scope link([ \w]*)`)

// LinkLocal returns the IPv6 link-local address of dev in ns, once duplicate address
// detection let it be used (waiting up to 5 s).
func LinkLocal(ctx context.Context, ns *Netns, dev string) (string, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := ns.Run(ctx, "ip", "-6", "addr", "show", "dev", dev, "scope", "link")
		if err != nil {
			return "", err
		}
		if m := linkLocalRE.FindStringSubmatch(string(out)); m != nil && !strings.Contains(m[2], "tentative") {
			return m[1], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no usable link-local address on %s in %s:\n%s", dev, ns.name, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
