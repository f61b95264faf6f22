// Package windiverttest provides a fake windivert.Driver, so that code built on
// windivert.Handle (the redirect engine) runs on any OS without the WinDivert driver: tests
// deliver packets and events to the handles the code opened and read back what it sent.
package windiverttest

import (
	"sync"
	"time"

	"github.com/agentcage/router/windivert"
)

// Driver is an in-memory windivert.Driver. Its zero value is not usable; call NewDriver.
// All methods are safe for concurrent use; mu guards every field below it.
type Driver struct {
	mu   sync.Mutex
	next uintptr
	hs   map[uintptr]*Handle
	all  []*Handle

	// OpenErr, when non-nil, is called by Open and its error (if any) returned instead of
	// opening a handle: e.g. return windivert.ErrAccessDenied.
	OpenErr func(filter string, layer windivert.Layer, priority int16, flags windivert.Flag) error
	// Major and Minor are the driver version reported by GetParam (2.2 by NewDriver).
	Major, Minor uint64

	observe func(string)
}

// Observe installs f, called after a handle is opened or its last reference is closed,
// without the driver's lock, with what happened ("open <filter>", "close <filter>"). nil
// removes it.
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
	return &Driver{next: 0x100, hs: map[uintptr]*Handle{}, Major: 2, Minor: 2}
}

// Handle is one fake WinDivert handle: what it was opened with, its receive queue and what
// was sent through it. mu guards the fields below it; cond and idle wait on mu.
type Handle struct {
	Filter   string
	Layer    windivert.Layer
	Priority int16
	Flags    windivert.Flag

	mu       sync.Mutex
	cond     *sync.Cond // a packet, a failure or a shutdown for the receivers
	idle     *sync.Cond // a receiver blocked on the empty queue, for WaitReceivers
	queue    []item
	sent     []Sent
	calls    SendCalls
	params   map[windivert.Param]uint64
	refs     int // references to the handle: the opener's and Hold's; closed at zero
	recvShut bool
	sendShut bool
	closed   bool
	failErr  error // set by Fail: what Recv returns once the queue is empty
	waiting  int   // receivers blocked on the empty queue
}

type item struct {
	pkt  []byte
	addr windivert.Address
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
	h.refs = 1
	d.mu.Lock()
	d.next++
	d.hs[d.next] = h
	d.all = append(d.all, h)
	hv := d.next
	d.mu.Unlock()
	d.notify("open", h)
	return hv, nil
}

// Hold takes another reference to the handle hv, as DuplicateHandle into another process
// does: the handle stays open, diverting packets into its queue (where nobody reads
// them), after its opener closed it or died, until release. release may be called once.
func (d *Driver) Hold(hv uintptr) (release func(), err error) {
	h, err := d.get(hv)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.refs++
	h.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { d.unref(h) }) }, nil
}

// Crash closes every handle value the opener holds, as the kernel does when the process
// that opened them dies: a handle also held elsewhere (Hold) stays open.
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

// unref drops one reference to h and closes it with the last one.
func (d *Driver) unref(h *Handle) {
	h.mu.Lock()
	h.refs--
	last := h.refs == 0
	if last {
		h.closed = true
		h.queue = nil
		h.cond.Broadcast()
	}
	h.mu.Unlock()
	if last {
		d.notify("close", h)
	}
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
		return nil, windivert.ErrInvalidHandle
	}
	return fh, nil
}

// Deliver queues a packet (nil for SOCKET/FLOW events) with its metadata for the next
// receive on h. It is a no-op on a closed handle. pkt is copied.
func (h *Handle) Deliver(pkt []byte, addr windivert.Address) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.queue = append(h.queue, item{pkt: append([]byte(nil), pkt...), addr: addr})
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

// Queued is the number of packets waiting to be received.
func (h *Handle) Queued() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.queue)
}

// waitLocked blocks until a packet is queued, or returns the error a real handle would.
func (h *Handle) waitLocked() error {
	for len(h.queue) == 0 {
		switch {
		case h.closed:
			return windivert.ErrInvalidHandle
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
	if err := h.waitLocked(); err != nil {
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
	if err := h.waitLocked(); err != nil {
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

// Shutdown implements windivert.Driver.
func (d *Driver) Shutdown(hv uintptr, how windivert.ShutdownHow) error {
	h, err := d.get(hv)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if how&windivert.ShutdownRecv != 0 {
		h.recvShut = true
	}
	if how&windivert.ShutdownSend != 0 {
		h.sendShut = true
	}
	h.cond.Broadcast()
	return nil
}

// Close implements windivert.Driver.
func (d *Driver) Close(hv uintptr) error {
	d.mu.Lock()
	h, ok := d.hs[hv]
	delete(d.hs, hv)
	d.mu.Unlock()
	if !ok {
		return windivert.ErrInvalidHandle
	}
	// The opener's receivers wake up (its handle value is gone) even when Hold keeps
	// the handle itself open.
	h.mu.Lock()
	h.recvShut, h.sendShut = true, true
	h.cond.Broadcast()
	h.mu.Unlock()
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

var _ windivert.Driver = (*Driver)(nil)
