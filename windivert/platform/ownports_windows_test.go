package platform

import (
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/agentcage/router/internal/winetest"
)

// TestReservePorts acquires the runtime port reservations and dials through a socket
// associated with the TCP one: the connection's local port lies in the reserved range. Wine
// does not implement the reservation ioctls: there the error must name the call (the daemon
// then falls back to telling its sockets by PID), and that is what is checked.
func TestReservePorts(t *testing.T) {
	ports, err := reservePorts()
	if winetest.UnderWine() {
		if err == nil {
			t.Logf("Wine reserved %v", ports.Ranges())
		} else if !strings.Contains(err.Error(), "SIO_ACQUIRE_PORT_RESERVATION") {
			t.Fatalf("error %v does not name the call", err)
		} else {
			t.Logf("under Wine: %v (the daemon falls back to its PID)", err)
			return
		}
	} else if err != nil {
		t.Fatal(err)
	}
	rs := ports.Ranges()
	if len(rs) != 2 || rs[0].Hi-rs[0].Lo+1 != reservedTCPPorts || rs[1].Hi-rs[1].Lo+1 != reservedUDPPorts {
		t.Fatalf("ranges %v, want %d TCP and %d UDP ports", rs, reservedTCPPorts, reservedUDPPorts)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	d := net.Dialer{Control: func(network, _ string, c syscall.RawConn) error { return ports.Reserve(network, c) }}
	c, err := d.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lp := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	if lp < rs[0].Lo || lp > rs[0].Hi {
		t.Errorf("local port %d outside the reserved %v (byte order of the start port?)", lp, rs[0])
	}
}
