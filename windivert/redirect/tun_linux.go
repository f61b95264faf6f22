package redirect

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// TUN is a Linux TUN device (IFF_TUN, no packet information header, no offloads) as a
// Device: everything read from it is traffic the host routed into it (Meta.Outbound), and
// everything written to it arrives in the host as if from the network. It cannot pass a
// packet on (Write of an outbound packet returns ErrCannotPass), so the engine over a TUN
// runs with Options.ReflectDirect and the TUN is given only the destinations to capture;
// e2e/tun_test.go describes the routing that goes with it.
//
// Without IFF_VNET_HDR and TUNSETOFFLOAD the kernel completes checksums and segments
// before it hands a packet to the TUN, so packets read are at most the MTU and carry valid
// checksums (Meta.ChecksumsValid).
//
// Read and Write may run concurrently; Close releases a blocked Read. The device exists
// while the TUN is open (it is not persistent) and is deleted by Close.
type TUN struct {
	f    *os.File
	name string

	once     sync.Once
	closeErr error
}

// OpenTUN creates the TUN device name (at most 15 bytes; "" lets the kernel choose) in the
// network namespace of the calling thread. Configure its addresses, link state and routes
// afterwards (e.g. with `ip`).
func OpenTUN(name string) (*TUN, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("redirect: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("redirect: tun name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("redirect: create tun %q: %w", name, err)
	}
	// With O_NONBLOCK, os.NewFile registers the descriptor with the runtime poller, so a
	// blocked Read returns when the file is closed.
	return &TUN{f: os.NewFile(uintptr(fd), "/dev/net/tun"), name: ifr.Name()}, nil
}

// Name is the interface name.
func (t *TUN) Name() string { return t.name }

// Read implements Device: one packet per call.
func (t *TUN) Read(buf []byte, metas []Meta) (int, int, error) {
	if len(metas) == 0 {
		return 0, 0, nil
	}
	n, err := t.f.Read(buf)
	if err != nil {
		return 0, 0, fmt.Errorf("redirect: read tun %s: %w", t.name, err)
	}
	metas[0] = Meta{Outbound: true, ChecksumsValid: true}
	return n, 1, nil
}

// Write implements Device.
func (t *TUN) Write(pkt []byte, m Meta) error {
	if m.Outbound {
		return ErrCannotPass
	}
	if _, err := t.f.Write(pkt); err != nil {
		return fmt.Errorf("redirect: write tun %s: %w", t.name, err)
	}
	return nil
}

// Close closes the TUN, which deletes the device. Calls after the first return its result.
func (t *TUN) Close() error {
	t.once.Do(func() { t.closeErr = t.f.Close() })
	return t.closeErr
}

var _ Device = (*TUN)(nil)
