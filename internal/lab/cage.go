package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// The router's state directory in the lab: `router run` and `router guard` record the last
// good guard there ($STATE_DIRECTORY), never in the machine's /var/lib/router.

// stateDirs are the labs' state directories, made on first use and removed by Close.
type stateDir struct {
	once sync.Once
	dir  string
	err  error
}

// StateDir is the lab's router state directory (made on first use, removed by Close).
func (l *Lab) StateDir() (string, error) {
	l.state.once.Do(func() {
		l.state.dir, l.state.err = os.MkdirTemp("", l.id+"-state-")
		if l.state.err == nil {
			dir := l.state.dir
			l.addUndo(func() error { return os.RemoveAll(dir) })
		}
	})
	return l.state.dir, l.state.err
}

// RouterCommand prepares `bin args...` in the host namespace with the lab's state
// directory; the caller runs it.
func (l *Lab) RouterCommand(ctx context.Context, bin string, args ...string) (*exec.Cmd, error) {
	dir, err := l.StateDir()
	if err != nil {
		return nil, fmt.Errorf("router state directory: %w", err)
	}
	cmd := l.host.Command(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "STATE_DIRECTORY="+dir)
	return cmd, nil
}

// The addresses AddUnlistedGuestAddrs gives the guest: a second IPv4 subnet and an IPv6
// prefix on the same VM-facing link, that a config listing only GuestNetwork does not name.
const (
	UnlistedGuestAddr  = "10.0.3.15"
	UnlistedHostAddr   = "10.0.3.1"
	UnlistedGuestAddr6 = "fd00:2::15"
	UnlistedHostAddr6  = "fd00:2::1"
	UnlistedNetwork6   = "fd00:2::/64"
)

// AddUnlistedGuestAddrs gives the guest addresses outside GuestNetwork, routed by the host
// like a second subnet or an IPv6 prefix of the VM-facing link (the host forwards IPv6 too,
// and the internet routes the prefix back): what a guest does when it gives itself another
// address, or a hypervisor hands out IPv6.
func (l *Lab) AddUnlistedGuestAddrs(ctx context.Context) error {
	batches := []struct {
		ns   *Netns
		cmds string
	}{
		{l.host, fmt.Sprintf("addr add %s/24 dev %s\naddr add %s/64 dev %s nodad\n", UnlistedHostAddr, HostVMDev, UnlistedHostAddr6, HostVMDev)},
		{l.guest, fmt.Sprintf("addr add %s/24 dev %s\naddr add %s/64 dev %s nodad\nroute add ::/0 via %s\n", UnlistedGuestAddr, GuestDev, UnlistedGuestAddr6, GuestDev, UnlistedHostAddr6)},
		{l.inet, fmt.Sprintf("route add %s via %s\n", UnlistedNetwork6, HostUplinkAddr6)},
	}
	for _, b := range batches {
		if err := l.run(ctx, b.cmds, "ip", "-n", b.ns.name, "-batch", "-"); err != nil {
			return fmt.Errorf("unlisted guest addresses in %s: %w", b.ns.name, err)
		}
	}
	return l.host.Do(func() error {
		return os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf/all/forwarding"), []byte("1"), 0o644)
	})
}
