package redirect

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// The layouts of the IP Helper tables that the Windows fallback lookup reads
// (GetExtendedTcpTable with TCP_TABLE_OWNER_PID_ALL, GetExtendedUdpTable with
// UDP_TABLE_OWNER_PID; iprtrmib.h, tcpmib.h, udpmib.h). They are parsed here, on every OS,
// so that the tests run on Linux; windivert_windows.go makes the calls.
//
// Every table starts with DWORD dwNumEntries followed by the rows. Addresses are in
// network byte order (a DWORD's bytes in memory are a.b.c.d); a port is a DWORD whose first
// two bytes in memory are the port in network byte order; other DWORDs are little-endian.
const (
	tcpRow4Size = 24 // MIB_TCPROW_OWNER_PID: state, local addr, local port, remote addr, remote port, pid
	tcpRow6Size = 56 // MIB_TCP6ROW_OWNER_PID: local addr[16], scope, port, remote addr[16], scope, port, state, pid
	udpRow4Size = 12 // MIB_UDPROW_OWNER_PID: local addr, local port, pid
	udpRow6Size = 28 // MIB_UDP6ROW_OWNER_PID: local addr[16], scope, port, pid

	// mibTCPStateListen is MIB_TCP_STATE_LISTEN.
	mibTCPStateListen = 2
)

// socketRow is one row of an IP Helper table; remote is zero for UDP.
type socketRow struct {
	local, remote netip.AddrPort
	state         uint32 // TCP only
	pid           uint32
}

var errShortTable = errors.New("redirect: ip helper table shorter than its entry count")

func port(b []byte) uint16 { return binary.BigEndian.Uint16(b[:2]) }

// parseTable reads the rows of a table of the given row size with parse.
func parseTable(b []byte, size int, parse func(r []byte) socketRow) ([]socketRow, error) {
	if len(b) < 4 {
		return nil, errShortTable
	}
	n := int(binary.LittleEndian.Uint32(b))
	// Rows start at offset 4: every row is made of DWORDs (and UCHAR[16]), so none
	// needs padding after dwNumEntries.
	if n < 0 || n > (len(b)-4)/size {
		return nil, errShortTable
	}
	rows := make([]socketRow, n)
	for i := range rows {
		rows[i] = parse(b[4+i*size : 4+(i+1)*size])
	}
	return rows, nil
}

func addr4(b []byte) netip.Addr  { return netip.AddrFrom4([4]byte(b[:4])) }
func addr16(b []byte) netip.Addr { return netip.AddrFrom16([16]byte(b[:16])).Unmap() }

func parseTCPTable4(b []byte) ([]socketRow, error) {
	return parseTable(b, tcpRow4Size, func(r []byte) socketRow {
		return socketRow{
			state:  binary.LittleEndian.Uint32(r[0:]),
			local:  netip.AddrPortFrom(addr4(r[4:]), port(r[8:])),
			remote: netip.AddrPortFrom(addr4(r[12:]), port(r[16:])),
			pid:    binary.LittleEndian.Uint32(r[20:]),
		}
	})
}

func parseTCPTable6(b []byte) ([]socketRow, error) {
	return parseTable(b, tcpRow6Size, func(r []byte) socketRow {
		return socketRow{
			local:  netip.AddrPortFrom(addr16(r[0:]), port(r[20:])),
			remote: netip.AddrPortFrom(addr16(r[24:]), port(r[44:])),
			state:  binary.LittleEndian.Uint32(r[48:]),
			pid:    binary.LittleEndian.Uint32(r[52:]),
		}
	})
}

func parseUDPTable4(b []byte) ([]socketRow, error) {
	return parseTable(b, udpRow4Size, func(r []byte) socketRow {
		return socketRow{local: netip.AddrPortFrom(addr4(r[0:]), port(r[4:])), pid: binary.LittleEndian.Uint32(r[8:])}
	})
}

func parseUDPTable6(b []byte) ([]socketRow, error) {
	return parseTable(b, udpRow6Size, func(r []byte) socketRow {
		return socketRow{local: netip.AddrPortFrom(addr16(r[0:]), port(r[20:])), pid: binary.LittleEndian.Uint32(r[24:])}
	})
}

// findOwner returns the PID of the row for a socket with local and remote (remote is
// ignored for UDP rows, which have none): an exact local address wins over a wildcard one,
// and a wildcard of the packet's family over one of the other (a dual-stack socket on [::]
// also sends IPv4). Rows of both families may be mixed; IPv4-mapped addresses are unmapped.
func findOwner(rows []socketRow, udp bool, local, remote netip.AddrPort) (uint32, bool) {
	var wild uint32
	var found, sameFamily bool
	for _, r := range rows {
		if r.local.Port() != local.Port() {
			continue
		}
		if !udp && (r.remote != remote || r.state == mibTCPStateListen) {
			continue
		}
		ra := r.local.Addr()
		switch {
		case ra == local.Addr():
			return r.pid, true
		case ra.IsUnspecified() && !sameFamily:
			same := ra.Is4() == local.Addr().Is4()
			if !found || same {
				wild, found, sameFamily = r.pid, true, same
			}
		}
	}
	return wild, found
}
