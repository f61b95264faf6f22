package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Message types and attributes of the NFLOG subsystem (linux/netfilter/nfnetlink_log.h).
const (
	subsysULOG    = 4 // NFNL_SUBSYS_ULOG
	msgPacket     = 0 // NFULNL_MSG_PACKET
	msgConfig     = 1 // NFULNL_MSG_CONFIG
	cfgAttrCmd    = 1 // NFULA_CFG_CMD
	cfgAttrMode   = 2 // NFULA_CFG_MODE
	cfgAttrQThr   = 5 // NFULA_CFG_QTHRESH
	cfgCmdBind    = 1 // NFULNL_CFG_CMD_BIND
	copyPacket    = 2 // NFULNL_COPY_PACKET
	copyRange     = 96
	receiveBuffer = 256 << 10
)

// Reader receives the packets logged to one group in the caller's network namespace (or
// NetNS's). Read and Close may be called from different goroutines; Close ends a Read in
// progress.
type Reader struct {
	c     *netlink.Conn
	group uint16
}

// Listen binds group; only one socket in a network namespace may bind a group.
// netNS is the fd of the network namespace to read in; 0 means the caller's.
func Listen(group uint16, netNS int) (*Reader, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: netNS})
	if err != nil {
		return nil, fmt.Errorf("nflog: open netlink: %w", err)
	}
	r := &Reader{c: c, group: group}
	cmd := netlink.Attribute{Type: cfgAttrCmd, Data: []byte{cfgCmdBind}}
	mode := netlink.Attribute{Type: cfgAttrMode, Data: binary.BigEndian.AppendUint32(nil, copyRange)}
	mode.Data = append(mode.Data, copyPacket, 0)
	qthr := netlink.Attribute{Type: cfgAttrQThr, Data: binary.BigEndian.AppendUint32(nil, 1)} // each packet at once
	for _, a := range []netlink.Attribute{cmd, mode, qthr} {
		if err := r.config(a); err != nil {
			c.Close()
			return nil, fmt.Errorf("nflog: bind group %d: %w", group, err)
		}
	}
	_ = c.SetReadBuffer(receiveBuffer) // a smaller buffer only loses more of a burst
	return r, nil
}

func (r *Reader) config(a netlink.Attribute) error {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{a})
	if err != nil {
		return err
	}
	hdr := []byte{unix.AF_UNSPEC, 0 /* NFNETLINK_V0 */, 0, 0}
	binary.BigEndian.PutUint16(hdr[2:], r.group)
	_, err = r.c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysULOG<<8 | msgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(hdr, attrs...),
	})
	return err
}

// Read blocks until packets arrive and returns them; messages that are not packets, or
// whose packet cannot be read, are skipped (counted in skipped). A burst the socket could
// not hold is lost without an error. After Close it returns an error.
func (r *Reader) Read() (pkts []Packet, skipped int, err error) {
	for {
		msgs, err := r.c.Receive()
		if errors.Is(err, unix.ENOBUFS) {
			continue // the kernel dropped some: the next ones are still good
		}
		if err != nil {
			return nil, 0, fmt.Errorf("nflog: receive: %w", err)
		}
		now := time.Now()
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(subsysULOG<<8|msgPacket) {
				skipped++
				continue
			}
			p, err := Parse(m.Data, now)
			if err != nil {
				skipped++
				continue
			}
			pkts = append(pkts, p)
		}
		if len(pkts) > 0 || skipped > 0 {
			return pkts, skipped, nil
		}
	}
}

// Close ends the binding; a Read in progress returns.
func (r *Reader) Close() error { return r.c.Close() }
