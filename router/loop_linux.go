package router

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/router/sniff"
)

// This file is the epoll loop: one per GOMAXPROCS, each owning its flows (see relay_linux.go).

// loop is one epoll instance and the goroutine that waits on it.
type loop struct {
	pipes  *pipePool
	kernel *kernel
	index  int // among nloops: the loop owns the sockmap pairs of its index
	nloops int
	epfd   int
	file   *os.File        // epfd, registered in Go's poller
	rc     syscall.RawConn // file's
	evfd   int             // eventfd: wakes the loop (stop, failed adds, shorter tick)
	base   time.Time
	done   chan struct{} // closed when the goroutine returned

	// mu guards the fields below. add holds it across its epoll_ctl calls, so the
	// descriptors are never closed under a registration.
	mu       sync.Mutex
	slots    []*relayFlow // by slot, the epoll data of both descriptors
	free     []int32
	failed   []*relayFlow // flows whose registration failed: the loop ends them
	tick     time.Duration
	stopping bool            // stop was called: the loop ends every flow and returns
	closed   bool            // epfd and evfd are closed
	lents    []*loopListener // the listeners the loop accepts on, by index (loop_setup_linux.go)
	gone     []*loopListener // listeners taken off, whose set-ups the loop ends
	notes    []passNote      // directions the sockmap program stopped redirecting
	kflows   []*relayFlow    // the kernel flows by pair - pairBase; nil until the first
	pairBase int
	pfree    []int32 // the free pairs of the loop's range
	// resumeDue: a paused listener's pause is over
	resumeDue bool
	// cutDue: a flow was stopped (meter.stop): the loop ends the flows whose cut is set
	cutDue bool

	// Of the loop's goroutine only: buffers for set-ups and accept, never held across
	// events, and the kernel flows' state.
	again          []*relayFlow // flows with a direction stopped at its budget (requeue)
	waiting, spare []*relayFlow // kernel flows waiting for a psock to drain (await)
	kbuf           []byte       // copies of passed bytes (kpump)
	snap           []*relayFlow
	sa             unix.RawSockaddrAny
	raw            rawFD
	buf            [handshakeRoom + earlyMax]byte // a handshake and the client's first bytes; answers
	sniffBuf       [sniff.Max]byte                // a client's first bytes, looked at for their name
	out            [handshakeRoom]byte            // a lock-step handshake's next message
}

func newLoop(pipes *pipePool, k *kernel, index, nloops int) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("relay loop: epoll: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("relay loop: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeSlot}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, fmt.Errorf("relay loop: epoll add: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, fmt.Errorf("relay loop: %w", err)
	}
	// The os.File owns epfd from here; closing it takes it out of Go's poller.
	file := os.NewFile(uintptr(epfd), "relay-epoll")
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		unix.Close(evfd)
		return nil, fmt.Errorf("relay loop: %w", err)
	}
	l := &loop{pipes: pipes, kernel: k, index: index, nloops: nloops, epfd: epfd, file: file, rc: rc, evfd: evfd, base: time.Now(), done: make(chan struct{}), tick: maxTick}
	go l.run()
	return l, nil
}

func (l *loop) now() time.Duration { return time.Since(l.base) + 1 } // never 0

// wake makes the loop's epoll_wait return; l.mu must be held.
func (l *loop) wake() {
	if l.closed {
		return
	}
	one := [8]byte{1}
	unix.Write(l.evfd, one[:])
}

// stop ends every flow of the loop and waits for its goroutine.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopping = true
	l.wake()
	l.mu.Unlock()
	<-l.done
}

// add registers f; from then on the loop owns it.
func (l *loop) add(f *relayFlow) {
	f.last = l.now()
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		f.release(l.pipes)
		l.report(f, errClosed)
		return
	}
	defer l.mu.Unlock()
	l.slotLocked(f)
	if f.kern != nil {
		l.addKernel(f)
	}
	l.setTickLocked(f.idle)
	for side, fd := range f.fd {
		ev := unix.EpollEvent{Events: f.interest(side), Fd: f.slot, Pad: int32(side)}
		if err := rawEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			// The other descriptor may already have events on the loop: the loop ends it.
			l.failed = append(l.failed, f)
			l.wake()
			return
		}
	}
}

// setTick makes the idle sweep run at least every quarter of d (within minTick, maxTick).
func (l *loop) setTick(d time.Duration) {
	l.mu.Lock()
	l.setTickLocked(d)
	l.mu.Unlock()
}

func (l *loop) setTickLocked(d time.Duration) {
	if tick := min(max(d/4, minTick), maxTick); tick < l.tick {
		l.tick = tick
		l.file.SetReadDeadline(time.Now().Add(tick))
	}
}

// run waits for the loop's epoll descriptor in Go's own poller (the descriptor is readable
// while it has events), so the loop holds no thread while it waits and its wake-ups are
// scheduled like any goroutine's; the read deadline paces the idle sweep. A loop blocking in
// epoll_wait on a locked thread of its own was measured against this (routerbench, paired):
// 1.3-1.4 × the router's CPU per connection and no lower latency, so it is not done.
func (l *loop) run() {
	defer close(l.done)
	var events [maxEvents]unix.EpollEvent
	var flows [maxEvents]*relayFlow
	var lents [maxEvents]*loopListener
	var cur, sweep []*relayFlow
	var notes []passNote
	var n int
	polling := false // the read deadline is kernelPoll away, for the waiting kernel flows
	var werr error
	wait := func(fd uintptr) bool {
		for {
			n, werr = epollPoll(int(fd), events[:])
			if werr != unix.EINTR {
				break
			}
		}
		return n != 0 || werr != nil || len(l.again) > 0
	}
	lastSweep := l.now()
	l.file.SetReadDeadline(time.Now().Add(l.currentTick()))
	for {
		n = 0
		err := l.rc.Read(wait)
		if err != nil && !isTimeout(err) {
			// The descriptor was closed under the loop: only stop does that.
			l.finishAll()
			return
		}
		if werr != nil {
			n = 0
		}
		now := l.now()
		l.mu.Lock()
		for i := range n {
			flows[i], lents[i] = nil, nil
			switch s := events[i].Fd; {
			case s >= 0 && int(s) < len(l.slots):
				flows[i] = l.slots[s]
			case s == listenSlot && int(events[i].Pad) < len(l.lents):
				lents[i] = l.lents[events[i].Pad]
			}
		}
		failed, gone, resume, cut := l.failed, l.gone, l.resumeDue, l.cutDue
		l.failed, l.gone, l.resumeDue, l.cutDue = nil, nil, false, false
		stopping := l.stopping
		notes, l.notes = l.notes, notes[:0]
		l.mu.Unlock()
		if stopping {
			l.finishAll()
			return
		}
		// Directions that stopped at their budget last time go on first.
		cur, l.again = l.again, cur[:0]
		for i, f := range cur {
			cur[i] = nil
			f.again = false
			for s := range f.dir {
				if !f.closed && f.dir[s].more {
					l.step(f, s, now)
				}
			}
			l.requeue(f)
		}
		for i := range n {
			f := flows[i]
			flows[i] = nil
			if f == nil {
				switch {
				case lents[i] != nil:
					l.acceptReady(lents[i], now)
					lents[i] = nil
				case events[i].Fd == wakeSlot:
					var buf [8]byte
					unix.RawSyscall(unix.SYS_READ, uintptr(l.evfd), uintptr(unsafe.Pointer(&buf[0])), 8)
				}
				continue
			}
			switch {
			case f.closed:
			case f.setup != nil:
				l.setupEvent(f.setup, int(events[i].Pad), events[i].Events)
				l.requeue(f)
			default:
				l.event(f, int(events[i].Pad), events[i].Events, now)
				l.requeue(f)
			}
		}
		for _, f := range failed {
			l.finish(f, errors.New("relay loop: epoll add failed"))
		}
		if cut {
			sweep = l.cutFlows(sweep[:0])
		}
		if gone != nil {
			l.goneListeners(gone)
		}
		if resume {
			l.resumeListeners(now)
		}
		for _, pn := range notes {
			if f := l.kflow(int(pn.pair)); f != nil && !f.closed {
				if err := l.enterPass(f, int(pn.side), now); err != nil {
					l.finish(f, err)
				}
			}
		}
		if len(l.waiting) > 0 {
			l.recheck(now)
		}
		if tick := l.currentTick(); now-lastSweep >= tick || isTimeout(err) && !polling {
			lastSweep = now
			sweep = l.sweep(now, sweep[:0])
			l.resumeListeners(now)
			polling = false
			l.file.SetReadDeadline(time.Now().Add(tick))
		}
		if len(l.waiting) > 0 {
			polling = true
			l.file.SetReadDeadline(time.Now().Add(kernelPoll))
		} else if polling {
			polling = false
			l.file.SetReadDeadline(time.Now().Add(max(l.currentTick()-(now-lastSweep), 0)))
		}
	}
}

func (l *loop) currentTick() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tick
}

// requeue queues f to go on after the batch when a direction of it stopped at its budget.
func (l *loop) requeue(f *relayFlow) {
	if !f.closed && !f.again && (f.dir[0].more || f.dir[1].more) {
		f.again = true
		l.again = append(l.again, f)
	}
}

// event moves what an edge on fd[side] allows: the direction it is the source of, and the
// direction it is the blocked receiver of.
func (l *loop) event(f *relayFlow, side int, ev uint32, now time.Duration) {
	if f.kern != nil {
		l.kevent(f, side, ev, now)
	} else {
		l.spliceEvent(f, side, ev, now)
	}
	if ev&unix.EPOLLERR != 0 && !f.closed {
		// A reset on a side whose reading already ended shows only here.
		if e, err := rawGetsockoptInt(f.fd[side], unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
			l.finish(f, fmt.Errorf("relay: %w", unix.Errno(e)))
		}
	}
}

// spliceEvent moves what an edge on fd[side] of a spliced flow allows.
func (l *loop) spliceEvent(f *relayFlow, side int, ev uint32, now time.Duration) {
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.step(f, side, now)
		if f.closed {
			return
		}
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		if d := &f.dir[1-side]; d.p != nil && d.p.buffered > 0 {
			l.step(f, 1-side, now)
		}
	}
}

// step moves direction s of f and ends the flow on an error or when both directions are
// done.
func (l *loop) step(f *relayFlow, s int, now time.Duration) {
	var err error
	if f.kern != nil {
		err = l.kstep(f, s, now)
	} else {
		err = l.pump(f, &f.dir[s], f.fd[s], f.fd[1-s], now)
	}
	if err == nil && f.wantKernel {
		err = l.promote(f)
	}
	if err != nil {
		l.finish(f, err)
		return
	}
	if f.dir[0].finished && f.dir[1].finished {
		l.finish(f, nil)
	}
}

// spliceOut moves what d's pipe holds to dst, one splice: n bytes, counted as d's (its
// total, its live meter, f's last activity). full: dst takes nothing now (EAGAIN; d.blocked
// notes since when, EPOLLOUT on dst resumes). EINTR moves nothing and is neither.
func (d *edir) spliceOut(f *relayFlow, dst int, now time.Duration) (n int64, full bool, err error) {
	n, err = splice(d.p.r, dst, d.p.buffered)
	switch {
	case err == unix.EINTR:
		return 0, false, nil
	case err == unix.EAGAIN:
		if d.blocked == 0 {
			d.blocked = now
		}
		return 0, true, nil
	case err != nil:
		return 0, false, fmt.Errorf("splice to socket: %w", err)
	}
	d.p.buffered -= int(n)
	d.n += n
	d.live.Add(n)
	f.last = now
	return n, false, nil
}

// pump moves d from src to dst until src has nothing more (EAGAIN), dst takes nothing more
// (EAGAIN: the pipe is kept, EPOLLOUT on dst resumes), EOF (dst is half-closed), or the
// budget is spent (d.more). It returns the error that ends the flow.
func (l *loop) pump(f *relayFlow, d *edir, src, dst int, now time.Duration) error {
	d.more = false
	if d.finished {
		return nil
	}
	moved := 0
	for {
		if d.p != nil && d.p.buffered > 0 {
			if _, full, err := d.spliceOut(f, dst, now); full || err != nil {
				return err
			}
			continue
		}
		d.blocked = 0
		if d.eof {
			l.pipes.release(&d.p)
			d.finished = true
			if err := rawShutdownWrite(dst); err != nil && err != unix.ENOTCONN {
				return fmt.Errorf("half-close: %w", err)
			}
			return nil
		}
		if moved >= budget {
			d.more = true
			return nil
		}
		if err := l.pipes.hold(&d.p); err != nil {
			return err
		}
		n, err := splice(src, d.p.w, pipeSize)
		d.dry = err == unix.EAGAIN
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			l.pipes.release(&d.p) // empty: drained above
			return nil
		case err != nil:
			return fmt.Errorf("splice from socket: %w", err)
		case n == 0:
			d.eof = true
			continue
		}
		d.p.buffered += int(n)
		moved += int(n)
		if d.upload != nil && d.upload.Add(n) {
			rawSetLinger0(src) // cut, both reset, before the chunk is passed on
			rawSetLinger0(dst)
			return errOverUpload
		}
	}
}

// finish closes f's descriptors (which takes them out of epoll), gives its pipes back and
// reports the result (done does not block: see relay.start).
func (l *loop) finish(f *relayFlow, err error) {
	if f.closed {
		return
	}
	f.release(l.pipes)
	l.mu.Lock()
	l.slots[f.slot] = nil
	l.free = append(l.free, f.slot)
	l.mu.Unlock()
	l.report(f, err)
}

// report calls f's done with its result, then gives back what a kernel flow held (its
// counters are read until done returned).
func (l *loop) report(f *relayFlow, err error) {
	if f.kern == nil {
		f.done(result{up: f.dir[0].n, down: f.dir[1].n, err: err})
		return
	}
	f.done(f.kernelResult(err))
	l.kernelDone(f)
}

// sweep ends the flows that were quiet for their idle timeout, and those whose receiver took
// nothing for it. buf is reused between sweeps.
func (l *loop) sweep(now time.Duration, buf []*relayFlow) []*relayFlow {
	l.mu.Lock()
	buf = append(buf, l.slots...)
	l.mu.Unlock()
	for i, f := range buf {
		buf[i] = nil
		if f == nil || f.closed {
			continue
		}
		if s := f.setup; s != nil {
			if s.awaiting && now >= s.nameBy {
				l.nameIn(s, true) // the wait for the name is over: the bytes that are in
				continue
			}
			if now >= s.deadline {
				l.expire(s)
			}
			continue
		}
		if f.kern != nil {
			if f.kernelActive() {
				f.last = now
			}
			for s := range f.dir {
				if !f.dir[s].passing && !f.dir[s].finished && f.kern.Passing(s) {
					if err := l.enterPass(f, s, now); err != nil {
						l.finish(f, err)
						break
					}
				}
			}
			if f.closed {
				continue
			}
		}
		if now-f.last >= f.idle {
			l.finish(f, errIdle)
			continue
		}
		f.keepAliveDue(now)
		for s := range f.dir {
			if b := f.dir[s].blocked; b != 0 && now-b >= f.idle {
				l.finish(f, errors.Join(errIdle, errors.New("the receiver took nothing")))
				break
			}
		}
	}
	return buf[:0]
}

// cutFlows ends the relayed flows whose cut is set (a reload's rules refuse them).
func (l *loop) cutFlows(buf []*relayFlow) []*relayFlow {
	l.mu.Lock()
	buf = append(buf, l.slots...)
	l.mu.Unlock()
	for i, f := range buf {
		buf[i] = nil
		if f != nil && !f.closed && f.setup == nil && f.cut != nil && f.cut.Load() {
			l.finish(f, errCut)
		}
	}
	return buf[:0]
}

// finishAll ends every flow (the loop set is closing) and releases the loop.
func (l *loop) finishAll() {
	l.mu.Lock()
	all := append([]*relayFlow(nil), l.slots...)
	all = append(all, l.failed...)
	l.failed = nil
	l.mu.Unlock()
	for _, f := range all {
		switch {
		case f == nil:
		case f.setup != nil:
			l.abort(f.setup, errClosed)
		default:
			l.finish(f, errClosed)
		}
	}
	l.mu.Lock()
	gone := l.gone
	l.gone = nil
	for _, e := range l.lents {
		if e != nil {
			l.deregisterLocked(e)
		}
	}
	l.mu.Unlock()
	for _, e := range gone {
		close(e.done)
	}
	l.mu.Lock()
	l.closed = true
	l.file.Close()
	unix.Close(l.evfd)
	l.mu.Unlock()
}

// slotLocked gives f a slot of l (a free one first); l.mu is held.
func (l *loop) slotLocked(f *relayFlow) {
	if n := len(l.free); n > 0 {
		f.slot = l.free[n-1]
		l.free = l.free[:n-1]
		l.slots[f.slot] = f
		return
	}
	f.slot = int32(len(l.slots))
	l.slots = append(l.slots, f)
}
