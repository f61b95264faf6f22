package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/packet"
)

// This file is the Windows capture as a Device over windivert.Driver, so that it compiles
// and is tested on every OS with windiverttest's fake driver; windivert_windows.go loads the
// real driver.

// WinDivertConfig describes the WinDivert capture.
type WinDivertConfig struct {
	// ListenerPort and DNSPort are the router's transparent listener and DNS TCP port
	// (DNSPort may be 0).
	ListenerPort, DNSPort uint16
	// Exclusions are the router's own endpoints that no filter takes (Upstreams,
	// SrcPorts). PIDs are ignored: the engine needs the router's own connect events to
	// tell its own flows (e.g. direct dials) from the apps'. ListenerPorts are set from
	// the ports above.
	Exclusions windivert.Exclusions
	// UDP, when not nil, limits the UDP the diverting handle takes, DNS aside, to these
	// destination ports: with local = false the engine needs only the caged processes'
	// UDP, and the guard refuses theirs to any other port before it is sent (its CagedUDP).
	// The host's other UDP then never crosses user mode. Nil: all UDP.
	UDP []windivert.PortRange
	// Priority is the priority of the diverting NETWORK handle (default 1000); the
	// listener guard opens at Priority+1, above it, so that it sees real inbound packets
	// but not the ones the engine injects.
	Priority int16
}

func (c WinDivertConfig) ports() []uint16 {
	ps := []uint16{c.ListenerPort}
	if c.DNSPort != 0 && c.DNSPort != c.ListenerPort {
		ps = append(ps, c.DNSPort)
	}
	return ps
}

func (c WinDivertConfig) exclusions() windivert.Exclusions {
	ex := c.Exclusions
	ex.PIDs = nil
	ex.ListenerPorts = c.ports()
	if ex.LocalDsts == nil {
		ex.LocalDsts = policy.LocalPrefixes()
	}
	return ex
}

// NetworkFilter is the filter of the diverting NETWORK handle: every outbound, non-loopback
// TCP and UDP (or UDP to the ports of c.UDP) packet of this host except the router's own endpoints (its reserved source
// ports, its upstreams, the forwards' answers), DNS to any address, ICMP echo requests,
// and the listeners' packets to reflected peers.
func (c WinDivertConfig) NetworkFilter() windivert.Filter {
	ex := c.exclusions()
	udp := windivert.And(windivert.FieldOutbound.Is(), windivert.Not(windivert.FieldLoopback.Is()), windivert.FieldUDP.Is(), ex.Filter())
	if c.UDP != nil {
		var ports []windivert.Filter
		for _, r := range c.UDP {
			ports = append(ports, windivert.FieldUDPDstPort.InRange(uint64(r.Lo), uint64(r.Hi)))
		}
		udp = windivert.And(udp, windivert.Or(ports...))
	}
	return windivert.Or(windivert.OutboundTCP(ex), udp, windivert.DNSQueries(ex), windivert.EchoRequests(ex), windivert.ReflectBack(c.ports()...))
}

// SocketFilter is the filter of the SOCKET sniff handle: connects and closes of every
// process, the router's included.
func (c WinDivertConfig) SocketFilter() windivert.Filter {
	ex := c.exclusions()
	ex.ListenerPorts = nil
	return windivert.SocketConnects(ex)
}

// GuardFilter is the filter of the DROP handle that keeps the network off the listeners.
func (c WinDivertConfig) GuardFilter() windivert.Filter { return windivert.ListenerGuard(c.ports()...) }

// WinDivertDevice is the Windows capture: a NETWORK handle that diverts what NetworkFilter
// matches (Read, Write), a SOCKET handle that sniffs connect events (ReadEvents), and a
// NETWORK DROP handle that keeps inbound packets from the network off the listener ports.
// Read and ReadEvents each belong to one goroutine; Write is safe for concurrent use.
type WinDivertDevice struct {
	net, sock, guard *windivert.Handle

	addrs   []windivert.Address // Read's scratch
	evAddrs []windivert.Address // ReadEvents' scratch

	batchMu    sync.Mutex          // guards the two below: WriteBatch's scratch
	batchBuf   []byte              // the packets back to back, for SendEx
	batchAddrs []windivert.Address // their addresses

	once     sync.Once
	closeErr error
}

// OpenWinDivert opens the three handles on d: the guard first (the listener is protected
// before anything is reflected to it), then the socket handle (connect events flow before
// the first SYN is diverted), then the diverting handle.
func OpenWinDivert(d windivert.Driver, c WinDivertConfig) (*WinDivertDevice, error) {
	if c.ListenerPort == 0 {
		return nil, errors.New("redirect: windivert: listener port is required")
	}
	if c.Priority == 0 {
		c.Priority = 1000
	}
	if c.Priority >= windivert.PriorityHighest {
		return nil, fmt.Errorf("redirect: windivert: priority %d leaves no room for the guard above it", c.Priority)
	}
	dev := &WinDivertDevice{}
	var err error
	fail := func(what string, err error) (*WinDivertDevice, error) {
		dev.Close()
		return nil, fmt.Errorf("redirect: windivert: %s: %w", what, err)
	}
	if dev.guard, err = windivert.Open(d, c.GuardFilter().String(), windivert.LayerNetwork, c.Priority+1, windivert.FlagDrop); err != nil {
		return fail("listener guard", err)
	}
	if dev.sock, err = windivert.Open(d, c.SocketFilter().String(), windivert.LayerSocket, c.Priority, windivert.FlagSniff|windivert.FlagRecvOnly); err != nil {
		return fail("socket events", err)
	}
	if dev.net, err = windivert.Open(d, c.NetworkFilter().String(), windivert.LayerNetwork, c.Priority, 0); err != nil {
		return fail("packets", err)
	}
	// A deep queue: user mode sees every packet of every flow the filter takes.
	for _, p := range []struct {
		p windivert.Param
		v uint64
	}{{windivert.ParamQueueLength, windivert.QueueLengthMax}, {windivert.ParamQueueSize, windivert.QueueSizeMax}} {
		if err := dev.net.SetParam(p.p, p.v); err != nil {
			return fail("queue parameters", err)
		}
	}
	return dev, nil
}

// NetworkHandle returns the raw value of the diverting handle, for a holder that keeps it
// open while the router's permits outlive the router (see the daemon's Windows platform).
func (d *WinDivertDevice) NetworkHandle() uintptr { return d.net.Raw() }

// ShareNetwork marks the diverting handle as shared with a holder (windivert.Handle.Share):
// Close then cancels this process's reads instead of shutting down the object the
// holder's copy shares.
func (d *WinDivertDevice) ShareNetwork() error { return d.net.Share() }

// Read implements Device.
func (d *WinDivertDevice) Read(buf []byte, metas []Meta) (int, int, error) {
	n := min(len(metas), windivert.BatchMax)
	if n == 0 {
		return 0, 0, nil
	}
	if len(d.addrs) < n {
		d.addrs = make([]windivert.Address, n)
	}
	nb, count, err := d.net.RecvEx(buf, d.addrs[:n])
	if err != nil && !errors.Is(err, windivert.ErrInsufficientBuffer) {
		return 0, 0, err
	}
	// A truncated packet is handed on as is: the engine cannot parse it and drops it.
	for i := range count {
		metas[i] = metaOf(&d.addrs[i])
	}
	return nb, count, nil
}

func metaOf(a *windivert.Address) Meta {
	nd := a.Network()
	return Meta{
		Outbound:       a.Outbound(),
		Loopback:       a.Loopback(),
		Impostor:       a.Impostor(),
		ChecksumsValid: (a.IPv6() || a.IPChecksum()) && (a.TCPChecksum() || a.UDPChecksum()),
		IfIdx:          nd.IfIdx,
		SubIfIdx:       nd.SubIfIdx,
	}
}

// addressOf is the WINDIVERT_ADDRESS that injects pkt as m describes.
func addressOf(pkt []byte, m Meta) windivert.Address {
	var a windivert.Address
	a.SetLayer(windivert.LayerNetwork)
	a.SetOutbound(m.Outbound)
	a.SetLoopback(m.Loopback)
	a.SetImpostor(m.Impostor)
	a.SetIPv6(len(pkt) > 0 && pkt[0]>>4 == 6)
	a.SetNetwork(windivert.NetworkData{IfIdx: m.IfIdx, SubIfIdx: m.SubIfIdx})
	if m.ChecksumsValid {
		a.SetIPChecksum(true)
		if p, err := packet.Parse(pkt); err == nil {
			a.SetTCPChecksum(p.IsTCP())
			a.SetUDPChecksum(p.IsUDP())
		}
	}
	return a
}

// Write implements Device: outbound packets go to the network, others into the host.
func (d *WinDivertDevice) Write(pkt []byte, m Meta) error {
	a := addressOf(pkt, m)
	_, err := d.net.Send(pkt, &a)
	return err
}

// WriteBatch implements BatchDevice: the packets go back to back into one buffer and out
// with one WinDivertSendEx per BatchMax packets, instead of one WinDivertSend each.
func (d *WinDivertDevice) WriteBatch(pkts [][]byte, metas []Meta) (int, error) {
	d.batchMu.Lock()
	defer d.batchMu.Unlock()
	sent := 0
	for len(pkts) > 0 {
		n := min(len(pkts), windivert.BatchMax)
		buf, addrs := d.batchBuf[:0], d.batchAddrs[:0]
		for i, p := range pkts[:n] {
			buf = append(buf, p...)
			addrs = append(addrs, addressOf(p, metas[i]))
		}
		d.batchBuf, d.batchAddrs = buf, addrs
		if _, err := d.net.SendEx(buf, addrs); err != nil {
			return sent, err
		}
		sent += n
		pkts, metas = pkts[n:], metas[n:]
	}
	return sent, nil
}

// ReadEvents implements EventSource: CONNECT and CLOSE events of the SOCKET handle.
func (d *WinDivertDevice) ReadEvents(evs []SocketEvent) (int, error) {
	n := min(len(evs), windivert.BatchMax)
	if n == 0 {
		return 0, nil
	}
	if len(d.evAddrs) < n {
		d.evAddrs = make([]windivert.Address, n)
	}
	_, count, err := d.sock.RecvEx(nil, d.evAddrs[:n])
	if err != nil {
		return 0, err
	}
	out := 0
	for i := range count {
		if ev, ok := eventOf(&d.evAddrs[i]); ok {
			evs[out] = ev
			out++
		}
	}
	return out, nil
}

func eventOf(a *windivert.Address) (SocketEvent, bool) {
	var k EventKind
	switch a.Event() {
	case windivert.EventSocketConnect:
		k = EventConnect
	case windivert.EventSocketClose:
		k = EventClose
	default:
		return SocketEvent{}, false
	}
	s := a.Socket()
	return SocketEvent{
		Kind:   k,
		Proto:  s.Protocol,
		Local:  unmapAP(netip.AddrPortFrom(s.LocalAddr, s.LocalPort)),
		Remote: unmapAP(netip.AddrPortFrom(s.RemoteAddr, s.RemotePort)),
		PID:    s.ProcessID,
		At:     eventTime(a.Timestamp),
	}, true
}

// Close closes the handles (diverting, socket, guard, in that order). Packets still
// queued in the diverting handle are lost. Later calls return the first result.
func (d *WinDivertDevice) Close() error {
	d.once.Do(func() {
		var errs []error
		for _, h := range []*windivert.Handle{d.net, d.sock, d.guard} {
			if h != nil {
				if err := h.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

var (
	_ BatchDevice = (*WinDivertDevice)(nil)
	_ Device      = (*WinDivertDevice)(nil)
	_ EventSource = (*WinDivertDevice)(nil)
)
