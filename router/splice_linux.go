package router

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Linux engine relays every flow on a few epoll loops (one per GOMAXPROCS), the way
// redsocks does on libevent, and moves the bytes with splice: socket → pipe → socket inside
// the kernel. A flow handed to the engine leaves Go's poller (its descriptors are duplicated
// and the *net.TCPConn closed), so a relayed flow holds no goroutine, no stack and no
// buffer: about the size of one eflow while it is quiet. A pipe is taken only once the
// source has bytes and given back as soon as the source has nothing more to give and the
// pipe is empty (a receiver that does not take its bytes keeps the pipe that holds them).
//
// Each loop owns its flows: only the loop's goroutine touches an eflow after add, so the
// per-event path takes no lock beyond one per epoll batch, allocates nothing, and reads the
// clock once per batch. Sockets are registered edge-triggered for reading and writing once;
// an event on one socket moves the direction it is the source of, and the direction it is
// the blocked receiver of.

const (
	pipeSize   = 1 << 20 // F_SETPIPE_SZ; the kernel keeps the default 64 KiB if refused
	spliceFlag = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
	maxEvents  = 256
	// budget bounds the bytes one direction moves per turn, so one fast flow cannot starve
	// the others of its loop; a direction that used its budget goes again after the batch.
	budget = 4 << 20
	// wakeSlot marks the loop's eventfd in the epoll data.
	wakeSlot = -1
	// maxTick and minTick bound the interval of the idle sweep (a quarter of the shortest
	// idle timeout seen).
	maxTick = time.Second
	minTick = 10 * time.Millisecond
)

type pipe struct {
	r, w     int
	buffered int // bytes in the pipe not yet written out
}

// pipePool keeps a few empty pipes for reuse; it is safe for concurrent use.
type pipePool struct {
	mu   sync.Mutex // guards free
	free []*pipe
	max  int
}

func newPipePool(max int) *pipePool { return &pipePool{max: max} }

func (pp *pipePool) get() (*pipe, error) {
	pp.mu.Lock()
	if n := len(pp.free); n > 0 {
		p := pp.free[n-1]
		pp.free = pp.free[:n-1]
		pp.mu.Unlock()
		return p, nil
	}
	pp.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("splice pipe: %w", err)
	}
	unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	return &pipe{r: fds[0], w: fds[1]}, nil
}

// put returns an empty pipe to the pool; a pipe still holding bytes is closed.
func (pp *pipePool) put(p *pipe) {
	pp.mu.Lock()
	if p.buffered == 0 && len(pp.free) < pp.max {
		pp.free = append(pp.free, p)
		pp.mu.Unlock()
		return
	}
	pp.mu.Unlock()
	p.close()
}

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// Close releases the pooled pipes.
func (pp *pipePool) Close() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, p := range pp.free {
		p.close()
	}
	pp.free = nil
}

// engine is the set of loops of one Router. Its methods are safe for concurrent use.
type engine struct {
	pipes *pipePool
	next  atomic.Uint32

	mu     sync.Mutex // guards loops and closed
	loops  []*loop    // started on first use
	closed bool
}

func newEngine() *engine { return &engine{pipes: newPipePool(64)} }

// loop returns the loop for a new flow, starting the loops on first use.
func (e *engine) loop() (*loop, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	if e.loops == nil {
		n := runtime.GOMAXPROCS(0)
		for range n {
			l, err := newLoop(e.pipes)
			if err != nil {
				for _, l := range e.loops {
					l.stop()
				}
				e.loops = nil
				return nil, err
			}
			e.loops = append(e.loops, l)
		}
	}
	return e.loops[int(e.next.Add(1))%len(e.loops)], nil
}

// Close ends the flows still running (with errClosed), stops the loops and releases the
// pipes. Flows started afterwards fail at once.
func (e *engine) Close() {
	e.mu.Lock()
	loops := e.loops
	e.loops, e.closed = nil, true
	e.mu.Unlock()
	for _, l := range loops {
		l.stop()
	}
	e.pipes.Close()
}

// start hands a and b to a loop; done is called once, after both descriptors are closed,
// on the loop's goroutine or the caller's: it must not block.
func (r *relay) start(a, b *net.TCPConn, done func(result)) {
	fa, errA := detach(a)
	fb, errB := detach(b)
	l, err := r.engine.loop()
	if err = errors.Join(errA, errB, err); err != nil {
		for _, fd := range []int{fa, fb} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		done(result{err: err})
		return
	}
	f := &eflow{fd: [2]int{fa, fb}, idle: r.idle, done: done}
	// Move what is already there (the client's request, typically) on this goroutine, before
	// the loop owns the flow: one wake-up less on the way of the first bytes.
	now := l.now()
	for s := range f.dir {
		if err := l.pump(f, &f.dir[s], f.fd[s], f.fd[1-s], now); err != nil {
			f.release(l.pipes)
			done(result{up: f.dir[0].n, down: f.dir[1].n, err: err})
			return
		}
	}
	if f.dir[0].finished && f.dir[1].finished {
		f.release(l.pipes)
		done(result{up: f.dir[0].n, down: f.dir[1].n})
		return
	}
	l.add(f)
}

// release closes f's descriptors (which takes them out of any epoll) and gives its pipes
// back.
func (f *eflow) release(pipes *pipePool) {
	f.closed = true
	closeFD(f.fd[0])
	closeFD(f.fd[1])
	for i := range f.dir {
		if p := f.dir[i].p; p != nil {
			pipes.put(p)
			f.dir[i].p = nil
		}
	}
}

// pending reads what c has already received into buf without waiting (0 when nothing is
// there, at EOF or on an error: the relay then finds out for itself).
func pending(c *net.TCPConn, buf []byte) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		for {
			m, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			if err == nil && m > 0 {
				n = m
			}
			return
		}
	})
	return n
}

// detach takes the socket out of Go's poller: it returns a duplicate descriptor (non-blocking
// like the original, which shares its file description) and closes c.
func detach(c *net.TCPConn) (int, error) {
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("take connection: %w", err)
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("take connection: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("take connection: %w", derr)
	}
	return fd, nil
}

// eflow is one relayed flow. After add, only its loop's goroutine touches it.
type eflow struct {
	slot   int32
	fd     [2]int  // 0: client side (a), 1: upstream side (b)
	dir    [2]edir // dir[s] is the direction whose source is fd[s]: 0 is up, 1 is down
	idle   time.Duration
	last   time.Duration // loop clock of the last byte moved either way
	done   func(result)
	closed bool
	again  bool // queued to go on after the batch
}

// edir is one direction of a flow.
type edir struct {
	p        *pipe // nil while no bytes are in flight
	n        int64
	eof      bool          // the source reached EOF
	finished bool          // EOF passed on (dst half-closed)
	blocked  time.Duration // loop clock when dst refused bytes; 0 when it takes them
	more     bool          // stopped at the budget with the source maybe still readable
}

// loop is one epoll instance and the goroutine that waits on it.
type loop struct {
	pipes *pipePool
	epfd  int
	file  *os.File        // epfd, registered in Go's poller
	rc    syscall.RawConn // file's
	evfd  int             // eventfd: wakes the loop (stop, failed adds, shorter tick)
	base  time.Time
	done  chan struct{} // closed when the goroutine returned

	// mu guards the fields below. add holds it across its epoll_ctl calls, so the
	// descriptors are never closed under a registration.
	mu       sync.Mutex
	slots    []*eflow // by slot, the epoll data of both descriptors
	free     []int32
	failed   []*eflow // flows whose registration failed: the loop ends them
	tick     time.Duration
	stopping bool // stop was called: the loop ends every flow and returns
	closed   bool // epfd and evfd are closed
}

func newLoop(pipes *pipePool) (*loop, error) {
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
	l := &loop{pipes: pipes, epfd: epfd, file: file, rc: rc, evfd: evfd, base: time.Now(), done: make(chan struct{}), tick: maxTick}
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
func (l *loop) add(f *eflow) {
	f.last = l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		f.release(l.pipes)
		f.done(result{up: f.dir[0].n, down: f.dir[1].n, err: errClosed})
		return
	}
	if n := len(l.free); n > 0 {
		f.slot = l.free[n-1]
		l.free = l.free[:n-1]
		l.slots[f.slot] = f
	} else {
		f.slot = int32(len(l.slots))
		l.slots = append(l.slots, f)
	}
	if tick := min(max(f.idle/4, minTick), maxTick); tick < l.tick {
		l.tick = tick
		l.file.SetReadDeadline(time.Now().Add(tick))
	}
	for side, fd := range f.fd {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: f.slot, Pad: int32(side)}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			// The other descriptor may already have events on the loop: the loop ends it.
			l.failed = append(l.failed, f)
			l.wake()
			return
		}
	}
}

// run waits for the loop's epoll descriptor in Go's own poller (the descriptor is readable
// while it has events), so the loop holds no thread while it waits and its wake-ups are
// scheduled like any goroutine's; the read deadline paces the idle sweep.
func (l *loop) run() {
	defer close(l.done)
	var events [maxEvents]unix.EpollEvent
	var flows [maxEvents]*eflow
	var again, cur, sweep []*eflow
	var n int
	var werr error
	wait := func(fd uintptr) bool {
		for {
			n, werr = epollPoll(int(fd), events[:])
			if werr != unix.EINTR {
				break
			}
		}
		return n != 0 || werr != nil || len(again) > 0
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
			flows[i] = nil
			if s := events[i].Fd; s != wakeSlot && int(s) < len(l.slots) {
				flows[i] = l.slots[s]
			}
		}
		failed := l.failed
		l.failed = nil
		stopping := l.stopping
		l.mu.Unlock()
		if stopping {
			l.finishAll()
			return
		}
		// Directions that stopped at their budget last time go on first.
		cur, again = again, cur[:0]
		for i, f := range cur {
			cur[i] = nil
			f.again = false
			for s := range f.dir {
				if !f.closed && f.dir[s].more {
					l.step(f, s, now)
				}
			}
			again = l.requeue(f, again)
		}
		for i := range n {
			f := flows[i]
			flows[i] = nil
			if f == nil {
				if events[i].Fd == wakeSlot {
					var buf [8]byte
					unix.Read(l.evfd, buf[:])
				}
				continue
			}
			if !f.closed {
				l.event(f, int(events[i].Pad), events[i].Events, now)
				again = l.requeue(f, again)
			}
		}
		for _, f := range failed {
			l.finish(f, errors.New("relay loop: epoll add failed"))
		}
		if tick := l.currentTick(); now-lastSweep >= tick || isTimeout(err) {
			lastSweep = now
			sweep = l.sweep(now, sweep[:0])
			l.file.SetReadDeadline(time.Now().Add(tick))
		}
	}
}

func (l *loop) currentTick() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tick
}

// requeue appends f to again when a direction of it stopped at its budget.
func (l *loop) requeue(f *eflow, again []*eflow) []*eflow {
	if !f.closed && !f.again && (f.dir[0].more || f.dir[1].more) {
		f.again = true
		again = append(again, f)
	}
	return again
}

// event moves what an edge on fd[side] allows: the direction it is the source of, and the
// direction it is the blocked receiver of.
func (l *loop) event(f *eflow, side int, ev uint32, now time.Duration) {
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.step(f, side, now)
		if f.closed {
			return
		}
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		if d := &f.dir[1-side]; d.p != nil && d.p.buffered > 0 {
			l.step(f, 1-side, now)
			if f.closed {
				return
			}
		}
	}
	if ev&unix.EPOLLERR != 0 {
		// A reset on a side whose reading already ended shows only here.
		if e, err := unix.GetsockoptInt(f.fd[side], unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
			l.finish(f, fmt.Errorf("relay: %w", unix.Errno(e)))
		}
	}
}

// step moves direction s of f and ends the flow on an error or when both directions are
// done.
func (l *loop) step(f *eflow, s int, now time.Duration) {
	if err := l.pump(f, &f.dir[s], f.fd[s], f.fd[1-s], now); err != nil {
		l.finish(f, err)
		return
	}
	if f.dir[0].finished && f.dir[1].finished {
		l.finish(f, nil)
	}
}

// pump moves d from src to dst until src has nothing more (EAGAIN), dst takes nothing more
// (EAGAIN: the pipe is kept, EPOLLOUT on dst resumes), EOF (dst is half-closed), or the
// budget is spent (d.more). It returns the error that ends the flow.
func (l *loop) pump(f *eflow, d *edir, src, dst int, now time.Duration) error {
	d.more = false
	if d.finished {
		return nil
	}
	moved := 0
	for {
		if d.p != nil && d.p.buffered > 0 {
			n, err := splice(d.p.r, dst, d.p.buffered)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				if d.blocked == 0 {
					d.blocked = now
				}
				return nil
			case err != nil:
				return fmt.Errorf("splice to socket: %w", err)
			}
			d.p.buffered -= int(n)
			d.n += n
			f.last = now
			continue
		}
		d.blocked = 0
		if d.eof {
			if d.p != nil {
				l.pipes.put(d.p)
				d.p = nil
			}
			d.finished = true
			if err := unix.Shutdown(dst, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
				return fmt.Errorf("half-close: %w", err)
			}
			return nil
		}
		if moved >= budget {
			d.more = true
			return nil
		}
		if d.p == nil {
			p, err := l.pipes.get()
			if err != nil {
				return err
			}
			d.p = p
		}
		n, err := splice(src, d.p.w, pipeSize)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			l.pipes.put(d.p) // empty: drained above
			d.p = nil
			return nil
		case err != nil:
			return fmt.Errorf("splice from socket: %w", err)
		case n == 0:
			d.eof = true
			continue
		}
		d.p.buffered += int(n)
		moved += int(n)
	}
}

// splice, epollPoll and closeFD are the loop's system calls. None of them ever blocks (the
// descriptors are non-blocking, the epoll wait has no timeout), so they are made raw: the
// runtime is not told, and sysmon never hands the loop's processor to another thread in
// the middle of one, which on a 2-core machine cost more context switches than the calls.
func splice(rfd, wfd, n int) (int64, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n), spliceFlag)
	if e != 0 {
		return 0, e
	}
	return int64(r), nil
}

func epollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func closeFD(fd int) {
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// finish closes f's descriptors (which takes them out of epoll), gives its pipes back and
// reports the result (done does not block: see relay.start).
func (l *loop) finish(f *eflow, err error) {
	if f.closed {
		return
	}
	f.release(l.pipes)
	l.mu.Lock()
	l.slots[f.slot] = nil
	l.free = append(l.free, f.slot)
	l.mu.Unlock()
	f.done(result{up: f.dir[0].n, down: f.dir[1].n, err: err})
}

// sweep ends the flows that were quiet for their idle timeout, and those whose receiver took
// nothing for it. buf is reused between sweeps.
func (l *loop) sweep(now time.Duration, buf []*eflow) []*eflow {
	l.mu.Lock()
	buf = append(buf, l.slots...)
	l.mu.Unlock()
	for i, f := range buf {
		buf[i] = nil
		if f == nil || f.closed {
			continue
		}
		if now-f.last >= f.idle {
			l.finish(f, errIdle)
			continue
		}
		for s := range f.dir {
			if b := f.dir[s].blocked; b != 0 && now-b >= f.idle {
				l.finish(f, errors.Join(errIdle, errors.New("the receiver took nothing")))
				break
			}
		}
	}
	return buf[:0]
}

// finishAll ends every flow (the engine is closing) and releases the loop.
func (l *loop) finishAll() {
	l.mu.Lock()
	all := append([]*eflow(nil), l.slots...)
	all = append(all, l.failed...)
	l.failed = nil
	l.mu.Unlock()
	for _, f := range all {
		if f != nil {
			l.finish(f, errClosed)
		}
	}
	l.mu.Lock()
	l.closed = true
	l.file.Close()
	unix.Close(l.evfd)
	l.mu.Unlock()
}
