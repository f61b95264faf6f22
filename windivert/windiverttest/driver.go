// Package windiverttest provides a fake windivert.Driver, so that code built on
// windivert.Handle (the redirect engine) runs on any OS without the WinDivert driver: tests
// deliver packets and events to the handles the code opened and read back what it sent.
//
// The fake models what the WinDivert 2.2 driver (sys/windivert.c) does with the object
// behind a handle, which every copy of the handle shares (DuplicateHandle, inheritance:
// Driver.Copy):
//   - WinDivertShutdown acts on the object: once it is shut down for receiving, the driver's
//     classify lets matching packets pass (Diverting reports false, Deliver refuses them),
//     whichever copy asked;
//   - closing one handle value while another copy stays open does not wake a receive in
//     progress (the file object lives on); CancelIO (CancelIoEx) does, with
//     ERROR_OPERATION_ABORTED;
//   - a queued packet older than the object's QUEUE_TIME expires: a receive drops it;
//   - at the last close of the object (IRP_MJ_CLEANUP) every queued packet younger than
//     QUEUE_TIME of a non-SNIFF handle is re-injected below ALE, where no WFP filter stops
//     it (Reinjected lists them); older ones are dropped.
package windiverttest

import (
	"sync"
	"time"

	"github.com/agentcage/router/windivert"
)

// Driver is an in-memory windivert.Driver. Its zero value is not usable; call NewDriver.
// All methods are safe for concurrent use; mu guards every field below it.
type Driver struct {
	mu     sync.Mutex
	next   uintptr
	hs     map[uintptr]*Handle // the opener's handle values
	copies map[uintptr]*Handle // other processes' (Copy)
	all    []*Handle

	// OpenErr, when non-nil, is called by Open and its error (if any) returned instead of
	// opening a handle: e.g. return windivert.ErrAccessDenied.
	OpenErr func(filter string, layer windivert.Layer, priority int16, flags windivert.Flag) error
	// Major and Minor are the driver version reported by GetParam (2.2 by NewDriver).
	Major, Minor uint64

	// Now is the driver's clock, for packet ages (time.Now by NewDriver).
	Now func() time.Time

	observe    func(string)
	reinjected []Reinjected
}

// Reinjected is a queued packet the driver injected when the last copy of its handle
// closed: it left the host (or reached its socket) without passing any WFP filter.
type Reinjected struct {
	Filter string
	Packet []byte
	Addr   windivert.Address
}

// Reinjected returns the packets re-injected at the last close of a handle, in order.
func (d *Driver) Reinjected() []Reinjected {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Reinjected(nil), d.reinjected...)
}

func (d *Driver) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Observe installs f, called after a handle is opened, shut down for receiving, or its
// last reference is closed, and for each packet re-injected at that close (before the
// close), without the driver's lock, with what happened ("open <filter>", "shutdown
// <filter>", "reinject <filter>", "close <filter>"). nil removes it.
func (d *Driver) Observe(f func(string)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.observe = f
}

func (d *Driver) notify(what string, h *Handle) {
	d.mu.Lock()
	f := d.observe
	d.mu.Unlock()
	if f != nil {
		f(what + " " + h.Filter)
	}
}

// NewDriver returns an empty fake driver reporting version 2.2.
func NewDriver() *Driver {
	return &Driver{next: 0x100, hs: map[uintptr]*Handle{}, copies: map[uintptr]*Handle{}, Major: 2, Minor: 2, Now: time.Now}
}

// Handle is one fake WinDivert object (what every copy of a handle refers to): what it was
// opened with, its receive queue and what was sent through it. mu guards the fields below
// it; cond and idle wait on mu.
type Handle struct {
	Filter   string
	Layer    windivert.Layer
	Priority int16
	Flags    windivert.Flag

	d        *Driver
	mu       sync.Mutex
	cancels  map[uintptr]int // CancelIO calls per handle value
	cond     *sync.Cond      // a packet, a failure or a shutdown for the receivers
	idle     *sync.Cond      // a receiver blocked on the empty queue, for WaitReceivers
	queue    []item
	sent     []Sent
	calls    SendCalls
	params   map[windivert.Param]uint64
	refs     int // references to the handle: every value of the opener and of Copy; closed at zero
	recvShut bool
	sendShut bool
	closed   bool
	failErr  error // set by Fail: what Recv returns once the queue is empty
	waiting  int   // receivers blocked on the empty queue
}

type item struct {
	pkt  []byte
	addr windivert.Address
	at   time.Time // when it was queued
}

// Sent is one packet injected through a handle; Call numbers the send call that carried
// it (1 for the handle's first Send or SendEx), so that a test sees which went together.
type Sent struct {
	Packet []byte
	Addr   windivert.Address
	Call   int
}

// SendCalls counts the send calls made on a handle.
type SendCalls struct {
	Send, SendEx int
}

// SendCalls returns how many Send and SendEx calls the handle received.
func (h *Handle) SendCalls() SendCalls {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// Open implements windivert.Driver.
func (d *Driver) Open(filter string, layer windivert.Layer, priority int16, flags windivert.Flag) (uintptr, error) {
	if d.OpenErr != nil {
		if err := d.OpenErr(filter, layer, priority, flags); err != nil {
			return 0, err
		}
	}
	h := &Handle{Filter: filter, Layer: layer, Priority: priority, Flags: flags, params: map[windivert.Param]uint64{
		windivert.ParamQueueLength: windivert.QueueLengthDefault,
		windivert.ParamQueueTime:   windivert.QueueTimeDefault,
		windivert.ParamQueueSize:   windivert.QueueSizeDefault,
	}}
	h.cond, h.idle = sync.NewCond(&h.mu), sync.NewCond(&h.mu)
	h.refs, h.d, h.cancels = 1, d, map[uintptr]int{}
	d.mu.Lock()
	d.next++
	d.hs[d.next] = h
	d.all = append(d.all, h)
	hv := d.next
	d.mu.Unlock()
	d.notify("open", h)
	return hv, nil
}

// Copy returns a new value for the handle hv, held by another process (a holder that
// inherited it or got it by DuplicateHandle): the object stays open, diverting packets
// into its queue, after its opener closed its value or died (Crash leaves a copy), until
// the copy is closed with Close too.
func (d *Driver) Copy(hv uintptr) (uintptr, error) {
	h, err := d.get(hv)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	h.refs++
	h.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	d.copies[d.next] = h
	return d.next, nil
}

// Crash closes every handle value the opener holds, as the kernel does when the process
// that opened them dies: an object another process holds a Copy of stays open.
func (d *Driver) Crash() {
	d.mu.Lock()
	var hs []*Handle
	for hv, h := range d.hs {
		hs = append(hs, h)
		delete(d.hs, hv)
	}
	d.mu.Unlock()
	for _, h := range hs {
		d.unref(h)
	}
}

// Live returns the handles whose every reference is not yet closed (held ones included).
func (d *Driver) Live() []*Handle {
	d.mu.Lock()
	all := append([]*Handle(nil), d.all...)
	d.mu.Unlock()
	var out []*Handle
	for _, h := range all {
		if !h.Closed() {
			out = append(out, h)
		}
	}
	return out
}

// unref drops one reference to h and closes it with the last one, as the driver's cleanup
// does: the queued packets younger than QUEUE_TIME of a non-SNIFF handle are re-injected,
// the older ones dropped.
func (d *Driver) unref(h *Handle) {
	h.mu.Lock()
	h.refs--
	last := h.refs == 0
	var again []item
	if last {
		h.closed = true
		if h.Flags&windivert.FlagSniff == 0 {
			now := d.now()
			for _, it := range h.queue {
				if !h.expiredLocked(it, now) {
					again = append(again, it)
				}
			}
		}
		h.queue = nil
		h.cond.Broadcast()
	}
	h.mu.Unlock()
	if !last {
		return
	}
	for _, it := range again {
		d.mu.Lock()
		d.reinjected = append(d.reinjected, Reinjected{Filter: h.Filter, Packet: it.pkt, Addr: it.addr})
		d.mu.Unlock()
		d.notify("reinject", h)
	}
	d.notify("close", h)
}

// expiredLocked reports whether it has waited in the queue longer than QUEUE_TIME.
func (h *Handle) expiredLocked(it item, now time.Time) bool {
	return now.Sub(it.at) > time.Duration(h.params[windivert.ParamQueueTime])*time.Millisecond
}

// expireLocked drops the expired packets at the head of the queue (they are queued in
// time order), as the driver's read service does.
func (h *Handle) expireLocked() {
	now := h.d.now()
	for len(h.queue) > 0 && h.expiredLocked(h.queue[0], now) {
		h.queue = h.queue[1:]
	}
}

// Diverting reports whether the object still takes the packets its filter matches into
// its queue: open, not shut down for receiving (by any copy), neither SNIFF (the packets
// pass anyway) nor DROP (they are dropped, never queued).
func (h *Handle) Diverting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed && !h.recvShut && h.Flags&(windivert.FlagSniff|windivert.FlagDrop) == 0
}

// Orphan reports whether the object is open though no handle value of its opener's is
// left (Crash or Close ran): only another process's Copy keeps it.
func (h *Handle) Orphan() bool {
	if h.Closed() {
		return false
	}
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	for _, x := range h.d.hs {
		if x == h {
			return false
		}
	}
	return true
}

// Handles returns every handle opened so far, in order, closed ones included.
func (d *Driver) Handles() []*Handle {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Handle(nil), d.all...)
}

// OpenHandles returns the handles not yet closed.
func (d *Driver) OpenHandles() []*Handle {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*Handle
	for _, h := range d.hs {
		out = append(out, h)
	}
	return out
}

func (d *Driver) get(h uintptr) (*Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fh, ok := d.hs[h]
	if !ok {
		fh, ok = d.copies[h]
	}
	if !ok {
		return nil, windivert.ErrInvalidHandle
	}
	return fh, nil
}

// Deliver queues a packet (nil for SOCKET/FLOW events) with its metadata for the next
// receive on h. It is a no-op on a closed handle or one shut down for receiving (the
// driver lets the packet pass). pkt is copied.
func (h *Handle) Deliver(pkt []byte, addr windivert.Address) {
	h.DeliverAt(pkt, addr, h.d.now())
}

// DeliverAt is Deliver of a packet the driver classified at time at (the packet's age
// counts from then): a test that decides whether a packet is diverted and then queues
// it stamps it with the moment it decided, as the driver's callout does in one step.
func (h *Handle) DeliverAt(pkt []byte, addr windivert.Address, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.recvShut {
		return
	}
	h.queue = append(h.queue, item{pkt: append([]byte(nil), pkt...), addr: addr, at: at})
	h.cond.Broadcast()
}

// Sent returns copies of what was sent through h so far.
func (h *Handle) Sent() []Sent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sent(nil), h.sent...)
}

// Closed reports whether the handle was closed.
func (h *Handle) Closed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Fail makes receiving on h fail with err once its queue is empty, as a driver error or
// another tool removing the driver does; a receiver blocked on h wakes up with it.
func (h *Handle) Fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failErr = err
	h.cond.Broadcast()
}

// Queued is the number of packets waiting to be received (expired ones included until a
// receive or the last close drops them).
func (h *Handle) Queued() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.queue)
}

// waitLocked blocks until a packet is queued, or returns the error a real handle would;
// hv is the handle value the receive came through (CancelIO on it aborts the wait).
func (h *Handle) waitLocked(hv uintptr) error {
	gen := h.cancels[hv]
	for h.expireLocked(); len(h.queue) == 0; h.expireLocked() {
		switch {
		case h.closed:
			return windivert.ErrInvalidHandle
		case h.cancels[hv] != gen:
			return windivert.ErrOperationAborted
		case h.failErr != nil:
			return h.failErr
		case h.recvShut:
			return windivert.ErrNoData
		}
		h.waiting++
		h.idle.Broadcast()
		h.cond.Wait()
		h.waiting--
	}
	return nil
}

// WaitReceivers blocks until the queue is empty and n receivers are blocked on it: what was
// delivered has been taken, and the code that took it is back waiting for more (for a
// receive loop, done with it). It reports false when that did not happen within timeout.
func (h *Handle) WaitReceivers(n int, timeout time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	expired := false
	t := time.AfterFunc(timeout, func() {
		h.mu.Lock()
		expired = true
		h.idle.Broadcast()
		h.mu.Unlock()
	})
	defer t.Stop()
	for len(h.queue) > 0 || h.waiting < n {
		if expired {
			return false
		}
		h.idle.Wait()
	}
	return true
}

// Recv implements windivert.Driver.
func (d *Driver) Recv(hv uintptr, buf []byte, addr *windivert.Address) (int, error) {
	h, err := d.get(hv)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.waitLocked(hv); err != nil {
		return 0, err
	}
	it := h.queue[0]
	h.queue = h.queue[1:]
	if addr != nil {
		*addr = it.addr
	}
	n := copy(buf, it.pkt)
	if n < len(it.pkt) {
		return n, windivert.ErrInsufficientBuffer
	}
	return n, nil
}

// RecvEx implements windivert.Driver: it returns as many queued packets as fit in buf and
// addrs, at least one (blocking for it).
func (d *Driver) RecvEx(hv uintptr, buf []byte, addrs []windivert.Address) (int, int, error) {
	h, err := d.get(hv)
	if err != nil {
		return 0, 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.waitLocked(hv); err != nil {
		return 0, 0, err
	}
	n, count := 0, 0
	for count < len(addrs) && len(h.queue) > 0 {
		it := h.queue[0]
		if n+len(it.pkt) > len(buf) {
			if count == 0 {
				copy(buf, it.pkt)
				addrs[0] = it.addr
				h.queue = h.queue[1:]
				return len(buf), 1, windivert.ErrInsufficientBuffer
			}
			break
		}
		copy(buf[n:], it.pkt)
		addrs[count] = it.addr
		n += len(it.pkt)
		count++
		h.queue = h.queue[1:]
	}
	return n, count, nil
}

// Send implements windivert.Driver.
func (d *Driver) Send(hv uintptr, pkt []byte, addr *windivert.Address) (int, error) {
	return d.send(hv, pkt, []windivert.Address{*addr}, false)
}

// SendEx implements windivert.Driver. The buffer is split with the IP length fields: a
// buffer that does not hold len(addrs) whole packets is ErrInvalidParameter, as the DLL
// would answer.
func (d *Driver) SendEx(hv uintptr, buf []byte, addrs []windivert.Address) (int, error) {
	return d.send(hv, buf, addrs, true)
}

func (d *Driver) send(hv uintptr, buf []byte, addrs []windivert.Address, ex bool) (int, error) {
	h, err := d.get(hv)
	if err != nil {
		return 0, err
	}
	pkts, ok := split(buf, len(addrs))
	if !ok {
		return 0, windivert.ErrInvalidParameter
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sendShut || h.closed {
		return 0, windivert.ErrNoData
	}
	if ex {
		h.calls.SendEx++
	} else {
		h.calls.Send++
	}
	call := h.calls.Send + h.calls.SendEx
	for i, p := range pkts {
		h.sent = append(h.sent, Sent{Packet: append([]byte(nil), p...), Addr: addrs[i], Call: call})
	}
	return len(buf), nil
}

// split cuts buf into n IP packets using their length fields.
func split(buf []byte, n int) ([][]byte, bool) {
	var out [][]byte
	for i := 0; i < n; i++ {
		if len(buf) < 1 {
			return nil, false
		}
		var l int
		switch buf[0] >> 4 {
		case 4:
			if len(buf) < 4 {
				return nil, false
			}
			l = int(buf[2])<<8 | int(buf[3])
		case 6:
			if len(buf) < 6 {
				return nil, false
			}
			l = 40 + (int(buf[4])<<8 | int(buf[5]))
		default:
			return nil, false
		}
		if l == 0 || l > len(buf) {
			return nil, false
		}
		out = append(out, buf[:l])
		buf = buf[l:]
	}
	return out, len(buf) == 0
}

// Shutdown implements windivert.Driver: it acts on the object, which every copy of the
// handle shares.
func (d *Driver) Shutdown(hv uintptr, how windivert.ShutdownHow) error {
	h, err := d.get(hv)
	if err != nil {
		return err
	}
	h.mu.Lock()
	shut := how&windivert.ShutdownRecv != 0 && !h.recvShut
	if how&windivert.ShutdownRecv != 0 {
		h.recvShut = true
	}
	if how&windivert.ShutdownSend != 0 {
		h.sendShut = true
	}
	h.cond.Broadcast()
	h.mu.Unlock()
	if shut {
		d.notify("shutdown", h)
	}
	return nil
}

// CancelIO implements windivert.Canceler (CancelIoEx): the receives in progress through
// the handle value hv return ErrOperationAborted; the object is not shut down.
func (d *Driver) CancelIO(hv uintptr) error {
	h, err := d.get(hv)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancels[hv]++
	h.cond.Broadcast()
	return nil
}

// Close implements windivert.Driver.
func (d *Driver) Close(hv uintptr) error {
	d.mu.Lock()
	h, ok := d.hs[hv]
	delete(d.hs, hv)
	if !ok {
		h, ok = d.copies[hv]
		delete(d.copies, hv)
	}
	d.mu.Unlock()
	if !ok {
		return windivert.ErrInvalidHandle
	}
	// A receive in progress through hv goes on while another copy (Copy) keeps the
	// object open, as on Windows: CancelIO or Shutdown wakes it.
	d.unref(h)
	return nil
}

// SetParam implements windivert.Driver.
func (d *Driver) SetParam(hv uintptr, p windivert.Param, v uint64) error {
	h, err := d.get(hv)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.params[p] = v
	return nil
}

// GetParam implements windivert.Driver.
func (d *Driver) GetParam(hv uintptr, p windivert.Param) (uint64, error) {
	h, err := d.get(hv)
	if err != nil {
		return 0, err
	}
	switch p {
	case windivert.ParamVersionMajor:
		return d.Major, nil
	case windivert.ParamVersionMinor:
		return d.Minor, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.params[p]
	if !ok {
		return 0, windivert.ErrInvalidParameter
	}
	return v, nil
}

var (
	_ windivert.Driver   = (*Driver)(nil)
	_ windivert.Canceler = (*Driver)(nil)
)
