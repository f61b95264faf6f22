package platform

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/windivert"
)

// Winsock port reservations (mstcpip.h): _WSAIOW(IOC_VENDOR, 100) and (IOC_VENDOR, 102).
const (
	sioAcquirePortReservation   = 0x98000064
	sioAssociatePortReservation = 0x98000066
)

// Reserved blocks: the router's own outbound TCP connections (one per proxied or direct
// flow it carries) and UDP sockets (DNS upstreams).
const (
	reservedTCPPorts = 4096
	reservedUDPPorts = 512
)

// portReservation is a runtime reservation per protocol: Windows keeps the ports out of
// every other socket's way as long as the socket that acquired them is open (the process).
type portReservation struct {
	tcp, udp reservation
}

type reservation struct {
	sock  windows.Handle // holds the reservation
	start uint16
	count uint16
	token uint64
}

// reservePorts acquires the TCP and UDP reservations.
func reservePorts() (OwnPorts, error) {
	var r portReservation
	var err error
	if r.tcp, err = acquire(windows.SOCK_STREAM, windows.IPPROTO_TCP, reservedTCPPorts); err != nil {
		return nil, fmt.Errorf("reserve tcp ports: %w", err)
	}
	if r.udp, err = acquire(windows.SOCK_DGRAM, windows.IPPROTO_UDP, reservedUDPPorts); err != nil {
		windows.Closesocket(r.tcp.sock)
		return nil, fmt.Errorf("reserve udp ports: %w", err)
	}
	return &r, nil
}

func acquire(typ, proto int, n uint16) (reservation, error) {
	s, err := windows.Socket(windows.AF_INET, typ, proto)
	if err != nil {
		return reservation{}, fmt.Errorf("socket: %w", err)
	}
	// INET_PORT_RANGE {USHORT StartPort (network order; 0: Windows chooses); USHORT NumberOfPorts}
	var in [4]byte
	binary.LittleEndian.PutUint16(in[2:], n)
	// INET_PORT_RESERVATION_INSTANCE {INET_PORT_RANGE Reservation; ULONG64 Token at offset 8}
	var out [16]byte
	var ret uint32
	if err := windows.WSAIoctl(s, sioAcquirePortReservation, &in[0], uint32(len(in)), &out[0], uint32(len(out)), &ret, nil, 0); err != nil {
		windows.Closesocket(s)
		return reservation{}, fmt.Errorf("SIO_ACQUIRE_PORT_RESERVATION: %w", err)
	}
	r := reservation{sock: s, start: binary.BigEndian.Uint16(out[0:]), count: binary.LittleEndian.Uint16(out[2:]), token: binary.LittleEndian.Uint64(out[8:])}
	if r.count == 0 || int(r.start)+int(r.count) > 65536 {
		windows.Closesocket(s)
		return reservation{}, fmt.Errorf("SIO_ACQUIRE_PORT_RESERVATION: odd answer %d+%d", r.start, r.count)
	}
	return r, nil
}

func (r *portReservation) Ranges() []windivert.PortRange {
	var out []windivert.PortRange
	for _, x := range []reservation{r.tcp, r.udp} {
		out = append(out, windivert.PortRange{Lo: x.start, Hi: x.start + x.count - 1})
	}
	return out
}

func (r *portReservation) Reserve(network string, c syscall.RawConn) error {
	res := r.tcp
	switch {
	case strings.HasPrefix(network, "tcp"):
	case strings.HasPrefix(network, "udp"):
		res = r.udp
	default:
		return nil
	}
	var ierr error
	err := c.Control(func(fd uintptr) {
		var ret uint32
		tok := res.token
		ierr = windows.WSAIoctl(windows.Handle(fd), sioAssociatePortReservation, (*byte)(unsafe.Pointer(&tok)), 8, nil, 0, &ret, nil, 0)
	})
	if err = errors.Join(err, ierr); err != nil {
		return fmt.Errorf("SIO_ASSOCIATE_PORT_RESERVATION: %w", err)
	}
	return nil
}
