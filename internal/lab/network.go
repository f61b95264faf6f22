package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// buildNetwork makes the three namespaces and what joins them: links, addresses, routes,
// sysctls, the leak counter in inet and the hypervisor's NAT in host.
func (l *Lab) buildNetwork(ctx context.Context) error {
	names := map[string]string{}
	for _, role := range []string{"inet", "host", "guest"} {
		name := l.id + "-" + role
		names[role] = name
		ns, err := l.addNamespace(ctx, name)
		if err != nil {
			return err
		}
		switch role {
		case "inet":
			l.inet = ns
		case "host":
			l.host = ns
			// A router that caged processes left its program on the cgroup root (it
			// outlives the router by design): it goes before the namespace does.
			l.addUndo(func() error { return removeCageMark(ns) })
		case "guest":
			l.guest = ns
		}
	}
	l.logf("lab %s: namespaces %s, %s, %s", l.id, names["inet"], names["host"], names["guest"])

	// Veths are created inside the namespaces: nothing touches the process's own namespace.
	batches := []struct{ ns, cmds string }{
		{names["host"], fmt.Sprintf(`link add %s type veth peer name %s netns %s
link add %s type veth peer name %s netns %s
`, HostUplinkDev, InetUplinkDev, names["inet"], HostVMDev, GuestDev, names["guest"])},
		{names["inet"], fmt.Sprintf(`link set lo up
addr add %s/32 dev lo
addr add %s/32 dev lo
addr add %s/24 dev %s
addr add %s/64 dev %s nodad
link set %s up
`, ServiceAddr, ExitAddr, InetUplinkAddr, InetUplinkDev, InetUplinkAddr6, InetUplinkDev, InetUplinkDev)},
		{names["host"], fmt.Sprintf(`link set lo up
addr add %s/24 dev %s
addr add %s/64 dev %s nodad
addr add %s/24 dev %s
link set %s up
link set %s up
route add default via %s
route add ::/0 via %s
`, HostUplinkAddr, HostUplinkDev, HostUplinkAddr6, HostUplinkDev, GatewayAddr, HostVMDev,
			HostUplinkDev, HostVMDev, InetUplinkAddr, InetUplinkAddr6)},
		{names["guest"], fmt.Sprintf(`link set lo up
addr add %s/24 dev %s
link set %s up
route add default via %s
`, GuestAddr, GuestDev, GuestDev, GatewayAddr)},
	}
	for _, b := range batches {
		if err := l.run(ctx, b.cmds, "ip", "-n", b.ns, "-batch", "-"); err != nil {
			return fmt.Errorf("wire namespace %s: %w", b.ns, err)
		}
	}

	common := map[string]string{
		"net/ipv4/ip_local_port_range": "1024 65000",
		"net/ipv4/tcp_tw_reuse":        "1",
		"net/core/somaxconn":           "4096",
	}
	extra := map[*Netns]map[string]string{
		// inet's servers close first, so TIME_WAIT would pile up there; without it a new
		// connection on a reused port is never refused by PAWS (the timestamp check).
		l.inet: {"net/ipv4/tcp_max_tw_buckets": "0"},
		l.host: {"net/ipv4/ip_forward": "1"},
	}
	for _, ns := range []*Netns{l.inet, l.host, l.guest} {
		if err := ns.Do(func() error {
			for _, set := range []map[string]string{common, extra[ns]} {
				for key, value := range set {
					if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
						return fmt.Errorf("sysctl %s: %w", key, err)
					}
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}

	if err := l.run(ctx, leakRuleset(), "ip", "netns", "exec", names["inet"], "nft", "-f", "-"); err != nil {
		return fmt.Errorf("leak counter: %w", err)
	}
	if err := l.run(ctx, natRuleset(), "ip", "netns", "exec", names["host"], "nft", "-f", "-"); err != nil {
		return fmt.Errorf("hypervisor nat: %w", err)
	}
	return nil
}

// addNamespace makes namespace name with the lab's resolver file (/etc/netns/NAME) and
// opens it; the lab's Close ends what still runs in it and removes both.
func (l *Lab) addNamespace(ctx context.Context, name string) (*Netns, error) {
	// Registered first: `ip netns add` may be interrupted after it created the namespace.
	l.addUndo(func() error {
		if _, err := os.Stat(filepath.Join(netnsRunDir, name)); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		var errs []error
		// Whatever still runs inside (a router a test did not stop) would keep the
		// namespace alive unseen.
		if err := endProcessesIn(context.Background(), name, l.logf); err != nil {
			errs = append(errs, err)
		}
		if _, err := runCmd(context.Background(), l.runTimeout, "", "ip", "netns", "del", name); err != nil {
			errs = append(errs, fmt.Errorf("delete namespace: %w", err))
		}
		return errors.Join(errs...)
	})
	if err := l.run(ctx, "", "ip", "netns", "add", name); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	dir := filepath.Join(etcNetnsDir, name)
	l.addUndo(func() error { return os.RemoveAll(dir) })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("resolver directory: %w", err)
	}
	resolv := fmt.Sprintf("# written by the router lab\nnameserver %s\noptions timeout:2 attempts:2\n", ServiceAddr)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return nil, fmt.Errorf("resolver file: %w", err)
	}
	ns, err := newNetns(name, l.runTimeout)
	if err != nil {
		return nil, err
	}
	l.addUndo(ns.close)
	return ns, nil
}
