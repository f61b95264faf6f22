package nftcap

// This file is the package's API on Linux: Install, Remove, Installed, Refusals. The table
// they install is built in chains_linux.go, from the helpers of expr_linux.go.

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentcage/router/router/nftcap/cagemark"
	"github.com/agentcage/router/rules/refusal"
)

// Install replaces the router's table with the ruleset for spec, in one netlink batch: the
// old table (if any, whatever it contains) is deleted and the new one added in the same
// kernel transaction, so there is never a moment without a guard, and a batch the kernel
// refuses leaves the old table as it was. The table carries no owner flag: it stays when
// the calling process exits or dies, until Remove. Before it, Install replaces the hold
// table (HoldTable) the same way, owned by the WithHolder option's Holder (without one, by
// nobody once Install returns; a hold table a running router owns is then left to it).
// Callers serialise Install and Remove on one table.
func Install(spec Spec, opts ...Option) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("nftcap install: invalid spec: %w", err)
	}
	o := collect(opts)
	// The routes first: without them the table's UDP capture refuses what it marks; without
	// the table they route nothing.
	if err := installUDPRoutes(spec, o); err != nil {
		return fmt.Errorf("nftcap install udp routing: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(o.netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return fmt.Errorf("nftcap install: open netlink: %w", err)
	}
	// The hold table first: it keeps the forward path closed whenever the table below is
	// missing, from the first install on.
	if err := installHold(spec, o); err != nil {
		return fmt.Errorf("nftcap install table inet %s: %w", HoldTable(spec.table()), err)
	}
	b := &builder{c: c}
	if err := b.replace(spec); err != nil {
		return fmt.Errorf("nftcap install table inet %s: %w", spec.table(), err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftcap install table inet %s: %w", spec.table(), err)
	}
	// The mark last: the table's rules for it are in place before a socket carries it.
	if !spec.caged() {
		// A program left by an earlier spec marks sockets that no rule looks at any more;
		// taken away when the kernel lets us (it may not offer eBPF at all).
		_ = cagemark.Remove(o.netNS)
		return nil
	}
	if err := cagemark.Install(cagemark.Config{Names: spec.CagedApps, Mark: spec.CagedMark, NetNS: o.netNS}); err != nil {
		return fmt.Errorf("nftcap install: caged processes' sockets: %w", err)
	}
	return nil
}

// Remove deletes the table named table and its hold table, and with them the guard. It
// fails while a running router owns the hold table (its Holder is open). Removing a table
// that is not there is not an error: the result, no table, is the same.
func Remove(table string, opts ...Option) error {
	if err := validTableName(table); err != nil {
		return fmt.Errorf("nftcap remove: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return fmt.Errorf("nftcap remove: open netlink: %w", err)
	}
	if err := removeHold(table, collect(opts)); err != nil {
		return fmt.Errorf("nftcap remove table inet %s: %w", HoldTable(table), err)
	}
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	c.AddTable(t) // create-if-absent makes the delete below succeed either way
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftcap remove table inet %s: %w", table, err)
	}
	if err := removeUDPRoutes(collect(opts)); err != nil {
		return fmt.Errorf("nftcap remove udp routing: %w", err)
	}
	if err := cagemark.Remove(collect(opts).netNS); err != nil {
		return fmt.Errorf("nftcap remove: caged processes' sockets: %w", err)
	}
	return nil
}

// Installed reports whether the table named table exists. It
// does not check the table's content.
func Installed(table string, opts ...Option) (bool, error) {
	ok, err := tableExists(table, collect(opts))
	if err != nil {
		return false, fmt.Errorf("nftcap installed: %w", err)
	}
	return ok, nil
}

// Refusals reads the table's refusal counters: packets refused per reason since the table
// was installed (an Install starts them at zero). A table without them (none installed, or
// one from an older router) gives an empty map.
func Refusals(table string, opts ...Option) (map[refusal.Reason]uint64, error) {
	if err := validTableName(table); err != nil {
		return nil, fmt.Errorf("nftcap refusals: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return nil, fmt.Errorf("nftcap refusals: open netlink: %w", err)
	}
	objs, err := c.GetNamedObjects(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return map[refusal.Reason]uint64{}, nil
		}
		return nil, fmt.Errorf("nftcap refusals: table inet %s: %w", table, err)
	}
	byName := map[string]refusal.Reason{}
	for _, r := range kernelReasons {
		byName[CounterName(r)] = r
	}
	out := map[refusal.Reason]uint64{}
	for _, o := range objs {
		if n, ok := o.(*nftables.NamedObj); ok {
			if r, known := byName[n.Name]; known {
				if cnt, ok := n.Obj.(*expr.Counter); ok {
					out[r] += cnt.Packets
				}
			}
		}
	}
	return out, nil
}

// receiveBuffer is the netlink socket's receive buffer: the kernel acknowledges each
// message of a batch, and a whole table is hundreds of messages; acknowledgements that do
// not fit in the default buffer (rmem_default, about 200 KiB, some 280 of them) fail the
// batch with ENOBUFS.
const receiveBuffer = 8 << 20

// bigReceiveBuffer sets the receive buffer of c to receiveBuffer, past net.core.rmem_max
// with SO_RCVBUFFORCE (the router runs with CAP_NET_ADMIN), within it otherwise.
func bigReceiveBuffer(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer)
	}); err != nil {
		return err
	}
	if serr != nil {
		return c.SetReadBuffer(receiveBuffer)
	}
	return nil
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
