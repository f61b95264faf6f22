//go:build !linux

package nftcap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"syscall"

	"github.com/agentcage/router/rules/refusal"
)

// errUnsupported is what every operation of this package returns off Linux.
func errUnsupported(op string) error {
	return fmt.Errorf("nftcap %s: nftables capture is not supported on %s: %w", op, runtime.GOOS, errors.ErrUnsupported)
}

// Install is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Install(spec Spec, opts ...Option) error { return errUnsupported("install") }

// Remove is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Remove(table string, opts ...Option) error { return errUnsupported("remove") }

// Installed is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Installed(table string, opts ...Option) (bool, error) {
	return false, errUnsupported("installed")
}

// OriginalDst is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errUnsupported("original dst")
}

// MarkControl is Linux only; elsewhere the returned function fails every socket with an
// error wrapping errors.ErrUnsupported.
func MarkControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	return func(string, string, syscall.RawConn) error { return errUnsupported("set mark") }
}

// TransparentControl is Linux only; elsewhere the returned function fails every socket
// with an error wrapping errors.ErrUnsupported.
func TransparentControl(mark uint32) func(network, address string, c syscall.RawConn) error {
	return func(string, string, syscall.RawConn) error { return errUnsupported("transparent listener") }
}

// SetMark is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func SetMark(c syscall.RawConn, mark uint32) error { return errUnsupported("set mark") }

// Refusals is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Refusals(table string, opts ...Option) (map[refusal.Reason]uint64, error) {
	return nil, errUnsupported("refusals")
}

// Check is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Check(spec Spec, opts ...Option) (string, error) { return "", errUnsupported("check") }

// Change is one kernel transaction that touched the watched table (Linux only).
type Change struct {
	PID  int
	Comm string
	Err  error
}

// Watcher delivers the kernel's nftables changes (Linux only).
type Watcher struct{}

// Watch is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func Watch(table string, opts ...Option) (*Watcher, error) { return nil, errUnsupported("watch") }

// Changes returns nil off Linux.
func (w *Watcher) Changes() <-chan Change { return nil }

// Close does nothing off Linux.
func (w *Watcher) Close() error { return nil }

// UDPConn is Linux only.
type UDPConn struct{}

// ListenUDP is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func ListenUDP(network string, port uint16, mark uint32) (*UDPConn, error) {
	return nil, errUnsupported("listen udp")
}

// ReadFrom is Linux only.
func (u *UDPConn) ReadFrom(b []byte) (n int, src, dst netip.AddrPort, err error) {
	return 0, netip.AddrPort{}, netip.AddrPort{}, errUnsupported("read udp")
}

// LocalAddr is Linux only.
func (u *UDPConn) LocalAddr() net.Addr { return nil }

// Close is Linux only.
func (u *UDPConn) Close() error { return nil }

// ListenReply is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func ListenReply(from netip.AddrPort, mark uint32) (*net.UDPConn, error) {
	return nil, errUnsupported("listen reply")
}

// Holder is Linux only (see the Linux documentation): elsewhere NewHolder fails.
type Holder struct{}

// NewHolder is Linux only; elsewhere it returns an error wrapping errors.ErrUnsupported.
func NewHolder(opts ...Option) (*Holder, error) { return nil, errUnsupported("holder") }

// Close does nothing off Linux.
func (h *Holder) Close() error { return nil }
