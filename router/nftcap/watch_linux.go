package nftcap

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
)

// Change is one kernel transaction that touched the watched table (see Watch).
type Change struct {
	// PID and Comm name the task that committed the transaction, as the kernel reports it
	// (a thread of the process); 0 and "" when it did not say.
	PID  int
	Comm string
	// Err is set on the last Change of a subscription that broke (the netlink socket's
	// buffer overflowed, or the socket failed): changes may have been missed since, so the
	// receiver should Check the table and Watch again.
	Err error
}

// Watcher delivers the kernel's nftables changes that may concern one table. Close ends it;
// its channel is closed then, or after a Change with Err set.
type Watcher struct {
	mon  *nftables.Monitor
	out  chan Change
	done chan struct{} // closed by Close: the forwarder stops sending
	once sync.Once
}

// watchBuffer is how many changes wait for the receiver; more are dropped, which loses
// nothing: the receiver checks the whole table after each change it takes.
const watchBuffer = 16

// Watch subscribes to the nftables events of the kernel (the netlink group
// NFNLGRP_NFTABLES) and delivers a Change for every transaction that added, changed or
// removed the inet table named table, one of its chains, rules or sets, or any set element
// (element events do not say which table they belong to). The router's own Install is
// reported too. The caller must keep receiving from Changes until it closes.
func Watch(table string, opts ...Option) (*Watcher, error) {
	if err := validTableName(table); err != nil {
		return nil, fmt.Errorf("nftcap watch: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(func(nc *netlink.Conn) error {
		// A flush of a large ruleset sends one event per rule; a larger buffer loses fewer.
		// Losing some is not fatal: the subscription then ends with Err, and the receiver
		// checks the table.
		return nc.SetReadBuffer(1 << 20)
	}))
	if err != nil {
		return nil, fmt.Errorf("nftcap watch: open netlink: %w", err)
	}
	mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(watchBuffer))
	gens, err := c.AddGenerationalMonitor(mon)
	if err != nil {
		return nil, fmt.Errorf("nftcap watch: subscribe: %w", err)
	}
	w := &Watcher{mon: mon, out: make(chan Change, watchBuffer), done: make(chan struct{})}
	go w.forward(gens, table)
	return w, nil
}

// Changes delivers the changes; it is closed when the Watcher ends.
func (w *Watcher) Changes() <-chan Change { return w.out }

// Close ends the subscription. It is safe to call more than once.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.done)
		err = w.mon.Close()
	})
	return err
}

// forward turns the monitor's generations into Changes for table until the monitor's
// channel closes (Close, or a receive error).
func (w *Watcher) forward(gens <-chan *nftables.MonitorEvents, table string) {
	defer close(w.out)
	for g := range gens {
		if w.stopped() {
			continue // drain: the monitor's goroutine must not block on its channel
		}
		var ch Change
		if g.GeneratedBy != nil {
			if g.GeneratedBy.Type == nftables.MonitorEventTypeOOB {
				err := g.GeneratedBy.Error
				if err == nil {
					err = errors.New("subscription ended")
				}
				w.send(Change{Err: fmt.Errorf("nftcap watch: %w", err)}, true)
				continue
			}
			if gen, ok := g.GeneratedBy.Data.(*nftables.GenMsg); ok {
				ch.PID, ch.Comm = int(gen.ProcPID), gen.ProcComm
			}
		}
		if concerns(g.Changes, table) {
			w.send(ch, false)
		}
	}
}

func (w *Watcher) stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// send delivers ch; a full buffer drops it unless must is set (then it waits for the
// receiver or Close).
func (w *Watcher) send(ch Change, must bool) {
	if must {
		select {
		case w.out <- ch:
		case <-w.done:
		}
		return
	}
	select {
	case w.out <- ch:
	default:
	}
}

// concerns reports whether one of the events may touch the inet table named table. Events
// that do not say which table they belong to (set elements; sets, whose table the library
// does not decode; anything that failed to decode) count: better a check too many.
func concerns(events []*nftables.MonitorEvent, table string) bool {
	for _, ev := range events {
		if ev.Error != nil {
			return true
		}
		var t *nftables.Table
		switch d := ev.Data.(type) {
		case *nftables.Table:
			t = d
		case *nftables.Chain:
			t = d.Table
		case *nftables.Rule:
			t = d.Table
		case *nftables.Set, []nftables.SetElement:
			return true
		default:
			continue // objects, flowtables: the router's table has none
		}
		if t == nil || t.Name == table && (t.Family == nftables.TableFamilyINet || t.Family == nftables.TableFamilyUnspecified) {
			return true
		}
	}
	return false
}
