package redirect

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/windivert/packet"

	"github.com/agentcage/router/rules"
)

// IPHelper answers owner lookups from the IP Helper tables (GetExtendedTcpTable,
// GetExtendedUdpTable): the fallback when no SOCKET event named a flow's process in time,
// and the list of connections that exist when the engine starts. It is safe for concurrent
// use.
//
// Lookups share dumps (ownerTables): every lookup waiting when a dump starts is answered by
// it, and a dump reads the IPv4 and the IPv6 table, since a dual-stack socket's IPv4 flows
// are in the IPv6 one.
type IPHelper struct {
	res      PIDResolver
	tcp, udp *windows.LazyProc
	tables   *ownerTables
}

// NewIPHelper returns an IPHelper that describes PIDs with res (nil: PIDs only).
func NewIPHelper(res PIDResolver) *IPHelper {
	dll := windows.NewLazySystemDLL("iphlpapi.dll")
	h := &IPHelper{res: res, tcp: dll.NewProc("GetExtendedTcpTable"), udp: dll.NewProc("GetExtendedUdpTable")}
	h.tables = &ownerTables{dump: h.both}
	return h
}

// both dumps the IPv4 and the IPv6 table of a protocol.
func (h *IPHelper) both(udp bool) ([]socketRow, error) {
	v4, err := h.rows(udp, false)
	if err != nil {
		return nil, err
	}
	v6, err := h.rows(udp, true)
	if err != nil {
		return nil, err
	}
	return append(v4, v6...), nil
}

// Table classes (iprtrmib.h).
const (
	tcpTableOwnerPIDAll = 5 // TCP_TABLE_OWNER_PID_ALL
	udpTableOwnerPID    = 1 // UDP_TABLE_OWNER_PID
)

// table calls GetExtended{Tcp,Udp}Table for family af and returns the raw table.
func (h *IPHelper) table(p *windows.LazyProc, af, class uint32) ([]byte, error) {
	size := uint32(16 << 10)
	for range 8 { // the table may grow between the size query and the call
		buf := make([]byte, size)
		r, _, _ := p.Call(uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0,
			uintptr(af), uintptr(class), 0)
		switch windows.Errno(r) {
		case 0:
			return buf, nil
		case windows.ERROR_INSUFFICIENT_BUFFER:
			size += 4 << 10
		default:
			return nil, fmt.Errorf("%s: %w", p.Name, windows.Errno(r))
		}
	}
	return nil, fmt.Errorf("%s: table keeps growing", p.Name)
}

func (h *IPHelper) rows(udp, v6 bool) ([]socketRow, error) {
	af := uint32(windows.AF_INET)
	if v6 {
		af = windows.AF_INET6
	}
	p, class := h.tcp, uint32(tcpTableOwnerPIDAll)
	if udp {
		p, class = h.udp, udpTableOwnerPID
	}
	b, err := h.table(p, af, class)
	if err != nil {
		return nil, err
	}
	switch {
	case udp && v6:
		return parseUDPTable6(b)
	case udp:
		return parseUDPTable4(b)
	case v6:
		return parseTCPTable6(b)
	}
	return parseTCPTable4(b)
}

// Lookup is a LookupFunc: the process of the socket local -> remote.
func (h *IPHelper) Lookup(proto uint8, local, remote netip.AddrPort) (rules.Owner, error) {
	pid, ok, err := h.tables.owner(proto == packet.ProtoUDP, local, remote)
	if err != nil {
		return rules.Owner{}, fmt.Errorf("redirect: owner of %v -> %v: %w", local, remote, err)
	}
	if !ok {
		return rules.Owner{}, fmt.Errorf("redirect: owner of %v -> %v: no such socket", local, remote)
	}
	if h.res == nil {
		return rules.Owner{PID: int(pid)}, nil
	}
	return h.res.ByPID(pid)
}

// Connections lists the host's TCP connections that are not listening sockets, with their
// owners' PIDs, for Engine.AllowExisting.
func (h *IPHelper) Connections() ([]Conn, error) {
	var out []Conn
	for _, v6 := range []bool{false, true} {
		rows, err := h.rows(false, v6)
		if err != nil {
			return nil, fmt.Errorf("redirect: tcp connections: %w", err)
		}
		for _, r := range rows {
			if r.state != mibTCPStateListen && r.remote.Port() != 0 {
				out = append(out, Conn{Local: r.local, Remote: r.remote, PID: r.pid})
			}
		}
	}
	return out, nil
}
