package windivert

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Driver is the raw call surface of WinDivert.dll: one method per C function, the handle an
// opaque value. *DLL implements it on Windows; windiverttest.Driver is a fake for tests on
// any OS. Failures are reported as Errno values (the GetLastError number) so that Handle
// can give them meaning; a Driver does no argument checking that Handle already does.
//
// Buffers: buf holds packets back to back; addrs has one Address per packet. The slices
// must stay valid for the duration of the call only.
type Driver interface {
	Open(filter string, layer Layer, priority int16, flags Flag) (uintptr, error)
	Recv(h uintptr, buf []byte, addr *Address) (n int, err error)
	RecvEx(h uintptr, buf []byte, addrs []Address) (n, count int, err error)
	Send(h uintptr, pkt []byte, addr *Address) (n int, err error)
	SendEx(h uintptr, buf []byte, addrs []Address) (n int, err error)
	Shutdown(h uintptr, how ShutdownHow) error
	Close(h uintptr) error
	SetParam(h uintptr, p Param, v uint64) error
	GetParam(h uintptr, p Param) (uint64, error)
}

// Canceler is implemented by a Driver that can cancel the calls in progress through one
// handle value without shutting the object down (CancelIoEx on Windows): they return
// ErrOperationAborted. A Handle needs it to be Shared.
type Canceler interface {
	CancelIO(h uintptr) error
}

// Handle is an open WinDivert handle: a filter attached at one layer and priority.
//
// Contract:
//   - Recv/RecvEx block until at least one packet or event matches, the handle is shut down
//     for receiving (then they return the queued packets, and ErrShutdown once the queue is
//     empty), or the handle is closed. Send/SendEx inject packets; the direction comes only
//     from Address.Outbound, and for inbound packets Network().IfIdx/SubIfIdx must be valid.
//   - Recv and Send may run at the same time from different goroutines, and several Recvs
//     may run at once (WinDivert queues are thread-safe). A goroutine blocked in Recv is
//     released by Shutdown(ShutdownRecv) or Close.
//   - Close shuts the handle down for both directions, waits for calls in progress to
//     return, then closes the driver handle. After Close every method returns ErrClosed; a
//     second Close returns ErrClosed.
//   - Shutdown and the queue parameters act on the driver's object, which every copy of
//     the handle shares (a holder process's, made by inheritance or DuplicateHandle): a
//     receive shutdown makes the driver let matching packets pass, whichever copy asked.
//     A Shared handle's Close therefore never shuts it down: it cancels this process's
//     calls in progress instead and closes its own value, and the other copy keeps
//     diverting.
//   - At the last close of the object (every copy) the driver re-injects the queued
//     packets younger than QUEUE_TIME of a non-SNIFF handle, below ALE where no WFP filter
//     stops them, and drops the older ones: a diverting handle whose packets must be lost
//     (failing closed) sets the shortest QUEUE_TIME and waits past it before that close
//     (see ExpireQueue).
//   - Errors are *Error values naming the operation and wrapping an Errno (whose message
//     says what to do) or ErrShutdown / ErrClosed.
//
// mu guards closed and the Add side of calls; the Driver is called without holding mu.
type Handle struct {
	d        Driver
	h        uintptr
	filter   string
	layer    Layer
	priority int16
	flags    Flag

	mu     sync.Mutex
	closed bool
	shared bool           // another process holds a copy: Close never shuts it down
	calls  sync.WaitGroup // calls in progress on h
}

// Open opens a handle on d after checking the arguments the way WinDivertOpen would, so
// that a mistake is reported with a clear message even where the driver cannot load (in
// tests), and then checks that the driver is version 2.x (an older driver already loaded by
// another application has another ABI). The filter should come from Filter.String or have
// been checked with CompileFilter.
func Open(d Driver, filter string, layer Layer, priority int16, flags Flag) (*Handle, error) {
	if err := CheckOpenArgs(layer, priority, flags); err != nil {
		return nil, &Error{Op: "open", Err: err}
	}
	h, err := d.Open(filter, layer, priority, flags)
	if err != nil {
		return nil, &Error{Op: fmt.Sprintf("open %s handle (priority %d, filter %q)", layer, priority, filter), Err: err}
	}
	major, err := d.GetParam(h, ParamVersionMajor)
	if err == nil && major != VersionMajor {
		err = fmt.Errorf("driver version %d.x is loaded, this program needs %d.x (another application loaded an old WinDivert; close it or reboot)", major, VersionMajor)
	}
	if err != nil {
		d.Close(h)
		return nil, &Error{Op: "check driver version", Err: err}
	}
	return &Handle{d: d, h: h, filter: filter, layer: layer, priority: priority, flags: flags}, nil
}

// CheckOpenArgs reports why WinDivertOpen would refuse layer, priority and flags, or nil.
// The rules are those of doc/windivert.html §5.4 (WinDivert 2.2.2).
func CheckOpenArgs(layer Layer, priority int16, flags Flag) error {
	switch {
	case layer > LayerReflect:
		return fmt.Errorf("unknown layer %d", uint32(layer))
	case priority < PriorityLowest || priority > PriorityHighest:
		return fmt.Errorf("priority %d outside [%d, %d]", priority, PriorityLowest, PriorityHighest)
	case flags&^(FlagSniff|FlagDrop|FlagRecvOnly|FlagSendOnly|FlagNoInstall|FlagFragments) != 0:
		return fmt.Errorf("unknown flags %#x", uint64(flags))
	case flags&(FlagSniff|FlagDrop) == FlagSniff|FlagDrop:
		return errors.New("flags SNIFF and DROP exclude each other")
	case flags&(FlagRecvOnly|FlagSendOnly) == FlagRecvOnly|FlagSendOnly:
		return errors.New("flags RECV_ONLY and SEND_ONLY exclude each other")
	case (layer == LayerFlow || layer == LayerReflect) && flags&(FlagSniff|FlagRecvOnly) != FlagSniff|FlagRecvOnly:
		return fmt.Errorf("layer %s needs flags SNIFF and RECV_ONLY", layer)
	case layer == LayerSocket && flags&FlagRecvOnly == 0:
		return errors.New("layer SOCKET needs flag RECV_ONLY (add SNIFF, or matching socket operations are blocked)")
	case flags&FlagFragments != 0 && layer != LayerNetwork && layer != LayerNetworkForward:
		return fmt.Errorf("flag FRAGMENTS needs a NETWORK layer, not %s", layer)
	}
	return nil
}

// Filter returns the filter string the handle was opened with.
func (h *Handle) Filter() string { return h.filter }

// Raw returns the driver's handle value (a Windows HANDLE), for DuplicateHandle and
// inheritance; it stays valid until Close.
func (h *Handle) Raw() uintptr { return h.h }

// Layer returns the layer the handle was opened at.
func (h *Handle) Layer() Layer { return h.layer }

// Priority returns the handle's priority.
func (h *Handle) Priority() int16 { return h.priority }

// Flags returns the flags the handle was opened with.
func (h *Handle) Flags() Flag { return h.flags }

func (h *Handle) String() string { return fmt.Sprintf("%s/%d %q", h.layer, h.priority, h.filter) }

// begin registers a call in progress, or returns ErrClosed; end unregisters it.
func (h *Handle) begin() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.calls.Add(1)
	return nil
}

func (h *Handle) end() { h.calls.Done() }

// recvErr turns a driver error of a receive into the documented one: a receive cancelled
// by a Shared handle's Close ends like one ended by a shutdown.
func (h *Handle) recvErr(op string, err error) error {
	if errors.Is(err, ErrNoData) {
		return ErrShutdown
	}
	if errors.Is(err, ErrOperationAborted) {
		h.mu.Lock()
		closing := h.closed
		h.mu.Unlock()
		if closing {
			return ErrShutdown
		}
	}
	return &Error{Op: op, Err: err}
}

// Share records that another process holds a copy of the handle (inheritance,
// DuplicateHandle): from then on Close cancels this process's calls in progress instead
// of shutting the shared object down. The driver must be a Canceler.
func (h *Handle) Share() error {
	if _, ok := h.d.(Canceler); !ok {
		return &Error{Op: "share", Err: errors.New("the driver cannot cancel a receive without shutting the handle down")}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.shared = true
	return nil
}

// Recv receives one packet (or event) into buf and its metadata into addr, and returns the
// packet length. buf should be MTUMax bytes long for NETWORK handles: a longer packet is
// truncated and reported with an *Error wrapping ErrInsufficientBuffer (n is then the
// truncated length). Events of the SOCKET and FLOW layers carry no packet: pass a nil buf.
func (h *Handle) Recv(buf []byte, addr *Address) (int, error) {
	if err := h.begin(); err != nil {
		return 0, err
	}
	defer h.end()
	n, err := h.d.Recv(h.h, buf, addr)
	if err != nil {
		return n, h.recvErr("recv", err)
	}
	return n, nil
}

// RecvEx receives up to len(addrs) packets (at most BatchMax) into buf, back to back, and
// returns the bytes used and the number of packets; packet i has metadata addrs[i]. Split
// buf[:n] with packet.SplitBatch. Errors as for Recv.
func (h *Handle) RecvEx(buf []byte, addrs []Address) (n, count int, err error) {
	if len(addrs) == 0 || len(addrs) > BatchMax {
		return 0, 0, &Error{Op: "recv", Err: fmt.Errorf("batch of %d addresses, want 1..%d", len(addrs), BatchMax)}
	}
	if err := h.begin(); err != nil {
		return 0, 0, err
	}
	defer h.end()
	n, count, err = h.d.RecvEx(h.h, buf, addrs)
	if err != nil {
		return n, count, h.recvErr("recv", err)
	}
	return n, count, nil
}

// Send injects one packet with metadata addr and returns the bytes sent.
func (h *Handle) Send(pkt []byte, addr *Address) (int, error) {
	if err := h.begin(); err != nil {
		return 0, err
	}
	defer h.end()
	n, err := h.d.Send(h.h, pkt, addr)
	if err != nil {
		return n, &Error{Op: "send", Err: err}
	}
	return n, nil
}

// SendEx injects len(addrs) packets (at most BatchMax) packed back to back in buf.
func (h *Handle) SendEx(buf []byte, addrs []Address) (int, error) {
	if len(addrs) == 0 || len(addrs) > BatchMax {
		return 0, &Error{Op: "send", Err: fmt.Errorf("batch of %d addresses, want 1..%d", len(addrs), BatchMax)}
	}
	if err := h.begin(); err != nil {
		return 0, err
	}
	defer h.end()
	n, err := h.d.SendEx(h.h, buf, addrs)
	if err != nil {
		return n, &Error{Op: "send", Err: err}
	}
	return n, nil
}

// Shutdown stops receiving, sending or both, for every copy of the handle (see the type's
// contract). Receives in progress return the packets still queued, then ErrShutdown.
func (h *Handle) Shutdown(how ShutdownHow) error {
	if how < ShutdownRecv || how > ShutdownBoth {
		return &Error{Op: "shutdown", Err: fmt.Errorf("bad mode %d", how)}
	}
	if err := h.begin(); err != nil {
		return err
	}
	defer h.end()
	if err := h.d.Shutdown(h.h, how); err != nil {
		return &Error{Op: "shutdown", Err: err}
	}
	return nil
}

// SetParam sets a queue parameter; values outside the documented range are refused before
// the driver is asked.
func (h *Handle) SetParam(p Param, v uint64) error {
	if err := checkParam(p, v); err != nil {
		return &Error{Op: "set param", Err: err}
	}
	if err := h.begin(); err != nil {
		return err
	}
	defer h.end()
	if err := h.d.SetParam(h.h, p, v); err != nil {
		return &Error{Op: fmt.Sprintf("set param %d", p), Err: err}
	}
	return nil
}

func checkParam(p Param, v uint64) error {
	var lo, hi uint64
	switch p {
	case ParamQueueLength:
		lo, hi = QueueLengthMin, QueueLengthMax
	case ParamQueueTime:
		lo, hi = QueueTimeMin, QueueTimeMax
	case ParamQueueSize:
		lo, hi = QueueSizeMin, QueueSizeMax
	case ParamVersionMajor, ParamVersionMinor:
		return fmt.Errorf("parameter %d is read-only", p)
	default:
		return fmt.Errorf("unknown parameter %d", p)
	}
	if v < lo || v > hi {
		return fmt.Errorf("parameter %d value %d outside [%d, %d]", p, v, lo, hi)
	}
	return nil
}

// cancelCalls cancels the calls in progress until none is left: a call registered just
// before Close may reach the driver after a cancel, so the cancel is repeated.
func (h *Handle) cancelCalls() {
	done := make(chan struct{})
	go func() {
		h.calls.Wait()
		close(done)
	}()
	c := h.d.(Canceler)
	for {
		c.CancelIO(h.h)
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ExpireQueue makes the packets queued in the object behind the handle value hv (a copy
// this process holds, e.g. a holder's inherited one) expire instead of being re-injected
// at its last close: it sets the shortest QUEUE_TIME and then calls wait with a duration
// past it (time.Sleep, or a test's clock). Call it once no matching packet can reach the
// queue any more (the WFP permits are gone) and right before the last close.
func ExpireQueue(d Driver, hv uintptr, wait func(time.Duration)) error {
	if err := d.SetParam(hv, ParamQueueTime, QueueTimeMin); err != nil {
		return &Error{Op: "set the shortest queue time", Err: err}
	}
	wait(ExpireWait)
	return nil
}

// ExpireWait is how long ExpireQueue waits after setting the shortest QUEUE_TIME: twice it.
const ExpireWait = 2 * QueueTimeMin * time.Millisecond

// GetParam reads a parameter.
func (h *Handle) GetParam(p Param) (uint64, error) {
	if p > ParamVersionMinor {
		return 0, &Error{Op: "get param", Err: fmt.Errorf("unknown parameter %d", p)}
	}
	if err := h.begin(); err != nil {
		return 0, err
	}
	defer h.end()
	v, err := h.d.GetParam(h.h, p)
	if err != nil {
		return 0, &Error{Op: fmt.Sprintf("get param %d", p), Err: err}
	}
	return v, nil
}

// Close shuts the handle down (a Shared one: cancels this process's calls in progress),
// waits for calls in progress, and closes it; see the type's contract. The driver's error,
// if any, is returned, but the handle is closed either way.
func (h *Handle) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.closed = true
	shared := h.shared
	h.mu.Unlock()
	var shutErr error
	if shared {
		h.cancelCalls()
	} else {
		shutErr = h.d.Shutdown(h.h, ShutdownBoth)
		h.calls.Wait()
	}
	if err := h.d.Close(h.h); err != nil {
		return &Error{Op: "close", Err: err}
	}
	if shutErr != nil {
		return &Error{Op: "shutdown before close", Err: shutErr}
	}
	return nil
}
