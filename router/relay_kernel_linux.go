package router

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentcage/router/router/sockmap"
	"golang.org/x/sys/unix"
)

// The kernel relay: a flow whose relay asks for it (relay.sockmap) and whose two sides are
// TCP goes into the loops' eBPF sockmap once it moved kernelAfter bytes by splice
// (promote), and the kernel then redirects each segment a side receives to the other
// side's egress, without waking the loop. The loop keeps the flow (its slot, its
// descriptors, the idle sweep) and does what the sockmap cannot (see package sockmap for
// the why):
//
//	EOF        on EPOLLRDHUP of a side, it half-closes the other side once the other side
//	           took every redirected byte (kclose, endDir)
//	budget     when the program stopped redirecting a direction (an event on the ring
//	           buffer), it waits until the other side took every redirected byte, then
//	           copies that direction itself, in order, until the program redirects again
//	           (kpump)
//	accounting the program's counters, shared memory, are the flow's live bytes (meter)
//	           and its activity for the idle sweep
//
// A kernel flow is registered for EPOLLRDHUP only (errors and hang-ups always wake the
// loop), plus EPOLLIN on a side whose direction the loop copies and EPOLLOUT on that
// direction's destination. The conditions that only time settles (a psock queue draining)
// are polled every kernelPoll while a flow waits for one.

const (
	// kernelPairs bounds the flows the sockmap holds at once, shared equally by the loops;
	// a flow started when its loop has no pair free is spliced. The shared counters cost 80
	// bytes a flow of kernel memory, 2.5 MiB in all.
	kernelPairs = 1 << 15
	// kernelPoll is how often a flow waiting for a psock to drain is looked at again.
	kernelPoll = time.Millisecond
	// copyBuf is the buffer of a loop copying a direction the program passed.
	copyBuf = 64 << 10
	// kernelAfter is how many bytes a flow moves by splice before it enters the sockmap
	// (promote); 0: it enters at its start. Entering later would spare short flows the
	// cost of entering (a psock for each socket, a dozen system calls: -10 % conn/s in the
	// lab), but the lab's 1 GiB downloads through a flow that entered mid-stream arrived
	// with a few KiB too many, twice in 9 (a segment sent twice; not reproduced on
	// loopback, cause not found), so flows enter at their start until that is understood.
	kernelAfter = 0
)

// kernel is the loop set's sockmap, loaded on first use. Its methods are safe for concurrent
// use.
type kernel struct {
	log    *slog.Logger
	budget uint32 // sockmap.Config.Budget: 0 is its default; set before the first get
	after  int64  // kernelAfter; 0 (tests): a flow enters at its start
	once   sync.Once
	m      *sockmap.Map // nil until loaded, and when the kernel refused it
	e      *loopSet
}

// get returns the sockmap, loading it on the first call; nil when the kernel refused it
// (logged once: the flows are spliced instead).
func (k *kernel) get() *sockmap.Map {
	k.once.Do(func() {
		m, err := sockmap.Load(sockmap.Config{Pairs: kernelPairs, Budget: k.budget})
		if err != nil {
			k.log.Warn("relay: the eBPF sockmap is not available, relaying with splice", "err", err)
			return
		}
		k.m = m
		go k.events(m)
	})
	return k.m
}

// events hands each direction the program stopped redirecting to the loop of its flow,
// until the map is closed.
func (k *kernel) events(m *sockmap.Map) {
	for {
		pair, side, err := m.Event()
		if err != nil {
			return
		}
		k.e.passNote(pair, side)
	}
}

func (k *kernel) close() {
	k.once.Do(func() {}) // no load after close
	if k.m != nil {
		k.m.Close()
	}
}

// pairsPerLoop is the number of pairs loop i owns: [i*per, (i+1)*per).
func pairsPerLoop(loops int) int { return kernelPairs / loops }

// passNote tells the loop owning pair that the program stopped redirecting its side.
func (e *loopSet) passNote(pair, side int) {
	e.mu.Lock()
	loops := e.loops
	e.mu.Unlock()
	if len(loops) == 0 {
		return
	}
	i := pair / pairsPerLoop(len(loops))
	if i >= len(loops) {
		return
	}
	l := loops[i]
	l.mu.Lock()
	l.notes = append(l.notes, passNote{pair: int32(pair), side: int8(side)})
	l.wake()
	l.mu.Unlock()
}

type passNote struct {
	pair int32
	side int8
}

// kernelBytes is a kernel flow's side of its meter.
type kernelBytes struct{ f *sockmap.Flow }

func (k *kernelBytes) bytes() (up, down int64) {
	return int64(k.f.Redirected(0)), int64(k.f.Redirected(1))
}

// promote puts f, a spliced flow that asked for the sockmap, into it once it moved
// kernelAfter bytes and each direction is between segments (idle), and registers its
// descriptors anew. A flow the sockmap cannot take stays spliced and is not asked again.
func (l *loop) promote(f *relayFlow) error {
	if f.dir[0].n+f.dir[1].n < l.kernel.after || !f.dir[0].idle() || !f.dir[1].idle() {
		return nil
	}
	f.wantKernel = false
	return l.intoKernel(f, f.meter)
}

// intoKernel puts f, a spliced flow registered on l, both directions idle, into the
// sockmap and registers its descriptors anew for a kernel flow; one the sockmap cannot take
// stays spliced (nil). An error ends the flow (it may be a kernel flow by then).
func (l *loop) intoKernel(f *relayFlow, m *meter) error {
	if !l.toKernel(f, m) {
		return nil
	}
	l.mu.Lock()
	l.addKernel(f)
	l.mu.Unlock()
	for side, fd := range f.fd {
		ev := unix.EpollEvent{Events: f.interest(side), Fd: f.slot, Pad: int32(side)}
		if err := rawEpollCtl(l.epfd, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
			return fmt.Errorf("relay: epoll: %w", err)
		}
	}
	return nil
}

// idle reports whether d can enter the sockmap now: its last read from the source ended
// with EAGAIN (no segment is half read: the program would take the whole of it again), its
// pipe is empty, and it did not reach EOF (a socket that received or sent a FIN cannot
// join a sockmap).
func (d *edir) idle() bool { return d.dry && d.p == nil && !d.eof && !d.finished }

// toKernel puts f into the sockmap, both directions idle. It returns false
// when f stays spliced (the sockmap is off or full, or the kernel refused the flow).
func (l *loop) toKernel(f *relayFlow, m *meter) bool {
	sm := l.kernel.get()
	if sm == nil {
		return false
	}
	pair, ok := l.allocPair(sm)
	if !ok {
		return false
	}
	kf, err := sm.Add(pair, f.fd[0], f.fd[1])
	if err != nil {
		l.freePair(pair)
		l.kernel.log.Debug("relay: flow stays spliced", "err", err)
		return false
	}
	for s := range f.fd {
		// What arrived between the last splice and the map is redirected now, before
		// anything newer.
		if _, err := sockmap.Kick(f.fd[s]); err != nil {
			// The socket is in the map and may have redirected already: the flow is a
			// kernel flow from here, and its error shows on the loop.
			break
		}
	}
	f.kern = kf
	f.meter = m
	m.kernel.Store(&kernelBytes{f: kf})
	return true
}

// addKernel makes f, a kernel flow being added, known by its pair; l.mu is held. A
// direction the program stopped redirecting before (its event found no flow) is noted
// again.
func (l *loop) addKernel(f *relayFlow) {
	l.kflows[f.kern.Pair()-l.pairBase] = f
	for s := range f.dir {
		if f.kern.Passing(s) {
			l.notes = append(l.notes, passNote{pair: int32(f.kern.Pair()), side: int8(s)})
			l.wake()
		}
	}
}

// kflow returns the kernel flow of pair, nil if none (any more).
func (l *loop) kflow(pair int) *relayFlow {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := pair - l.pairBase; l.kflows != nil && i >= 0 && i < len(l.kflows) {
		return l.kflows[i]
	}
	return nil
}

// allocPair takes a free pair of the loop's range.
func (l *loop) allocPair(sm *sockmap.Map) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kflows == nil {
		per := pairsPerLoop(l.nloops)
		l.kflows = make([]*relayFlow, per)
		l.pairBase = l.index * per
		l.pfree = make([]int32, per)
		for i := range per {
			l.pfree[i] = int32(l.pairBase + per - 1 - i)
		}
	}
	n := len(l.pfree)
	if n == 0 {
		return 0, false
	}
	p := l.pfree[n-1]
	l.pfree = l.pfree[:n-1]
	return int(p), true
}

// freePair gives a kernel flow's pair back once the flow reported its end: the sockets are
// closed (out of the map) and nobody reads its counters any more.
func (l *loop) freePair(pair int) {
	l.mu.Lock()
	l.kflows[pair-l.pairBase] = nil
	l.pfree = append(l.pfree, int32(pair))
	l.mu.Unlock()
}

// kernelDone forgets a kernel flow after its done callback returned.
func (l *loop) kernelDone(f *relayFlow) {
	f.kern.Release()
	f.meter.kernel.Store(nil)
	l.freePair(f.kern.Pair())
}

// interest is what the loop waits for on f.fd[side].
func (f *relayFlow) interest(side int) uint32 {
	if f.kern == nil {
		return unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
	}
	ev := uint32(unix.EPOLLRDHUP | unix.EPOLLET)
	if f.dir[side].passing {
		ev |= unix.EPOLLIN
	}
	if f.dir[1-side].passing {
		ev |= unix.EPOLLOUT
	}
	return ev
}

// kevent handles an edge on fd[side] of a kernel flow.
func (l *loop) kevent(f *relayFlow, side int, ev uint32, now time.Duration) {
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP) != 0 {
		f.dir[side].hup = true
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.step(f, side, now)
		if f.closed {
			return
		}
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 && f.dir[1-side].passing {
		l.step(f, 1-side, now)
	}
}

// kstep moves direction s of a kernel flow as far as it can now.
func (l *loop) kstep(f *relayFlow, s int, now time.Duration) error {
	d := &f.dir[s]
	if d.finished {
		return nil
	}
	if !d.passing && f.kern.Passing(s) {
		return l.enterPass(f, s, now)
	}
	if d.passing {
		if err := l.kpump(f, s, now); err != nil || d.passing || d.finished {
			return err
		}
	}
	if d.hup {
		return l.kclose(f, s, now)
	}
	return nil
}

// enterPass starts copying direction s, which the program stopped redirecting.
func (l *loop) enterPass(f *relayFlow, s int, now time.Duration) error {
	d := &f.dir[s]
	if d.passing || d.finished {
		return nil
	}
	d.passing, d.drained = true, false
	return l.setInterest(f, s, now)
}

// leavePass stops copying direction s: the program redirects it again.
func (l *loop) leavePass(f *relayFlow, s int, now time.Duration) error {
	f.dir[s].passing = false
	return l.setInterest(f, s, now)
}

// setInterest registers f's descriptors for what they wait for now (interest), and moves
// direction s if it is copied.
func (l *loop) setInterest(f *relayFlow, s int, now time.Duration) error {
	for side, fd := range f.fd {
		ev := unix.EpollEvent{Events: f.interest(side), Fd: f.slot, Pad: int32(side)}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
			return fmt.Errorf("relay: epoll: %w", err)
		}
	}
	if !f.dir[s].passing {
		return nil
	}
	return l.kpump(f, s, now)
}

// kclose half-closes the destination of direction s, whose source reached EOF, once the
// program saw every byte the source received and the destination took every redirected
// byte; until then the flow waits (await). The kick's receive takes the socket's lock, so
// the verdicts of every segment up to the FIN are done when it returns (the kernel reports
// the FIN before it runs the verdict of the segment that carried it).
func (l *loop) kclose(f *relayFlow, s int, now time.Duration) error {
	if _, err := sockmap.Kick(f.fd[s]); err != nil {
		return err
	}
	if f.kern.Passing(s) {
		return l.enterPass(f, s, now)
	}
	return l.endDir(f, s, now)
}

// endDir half-closes the destination of direction s, whose source sent its last byte and
// its FIN, once the destination took every byte redirected to it; until then the flow
// waits (await).
func (l *loop) endDir(f *relayFlow, s int, now time.Duration) error {
	d := &f.dir[s]
	ok, err := f.kern.Drained(s, d.sent)
	if err != nil {
		return err
	}
	if !ok {
		l.await(f, d, now)
		return nil
	}
	return l.halfClose(d, f.fd[1-s])
}

func (l *loop) halfClose(d *edir, dst int) error {
	d.finished = true
	d.blocked = 0
	if err := unix.Shutdown(dst, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
		return fmt.Errorf("half-close: %w", err)
	}
	return nil
}

// await puts f on the list of flows looked at again every kernelPoll, d being the direction
// that waits (blocked from now, for the idle sweep).
func (l *loop) await(f *relayFlow, d *edir, now time.Duration) {
	if d.blocked == 0 {
		d.blocked = now
	}
	if !f.waiting {
		f.waiting = true
		l.waiting = append(l.waiting, f)
	}
}

// recheck looks again at the flows waiting for a psock to drain.
func (l *loop) recheck(now time.Duration) {
	w := l.waiting
	l.waiting = l.spare[:0]
	for i, f := range w {
		w[i] = nil
		f.waiting = false
		for s := range f.dir {
			if !f.closed {
				l.step(f, s, now)
			}
		}
	}
	l.spare = w[:0]
}

// kpump copies direction s, which the program passes to its source's receive queue, once
// the destination took every byte redirected before (Drained, again after each new trip of
// the program): from the source's receive queue through a pipe to the destination, like
// pump. It reports every byte sent to the program (SetSent), which redirects again once
// the loop sent all it passed; the loop then stops copying (leavePass).
func (l *loop) kpump(f *relayFlow, s int, now time.Duration) error {
	d := &f.dir[s]
	d.more = false
	if d.finished {
		return nil
	}
	src, dst := f.fd[s], f.fd[1-s]
	moved := 0
	for {
		if d.p != nil && d.p.buffered > 0 {
			// While the loop holds passed bytes the program cannot redirect again (it waits
			// for SetSent to reach Passed), so no new trip can start under them; but the
			// bytes read since the last check may belong to one that started before.
			if t := f.kern.Trips(s); t != d.trip || !d.drained {
				d.trip, d.drained = t, false
				ok, err := f.kern.Drained(s, d.sent)
				if err != nil {
					return err
				}
				if !ok {
					l.await(f, d, now)
					return nil
				}
				d.drained = true
			}
			n, full, err := d.spliceOut(f, dst, now)
			if full || err != nil {
				return err
			}
			if n > 0 {
				d.sent += uint64(n)
				f.kern.SetSent(s, d.sent)
			}
			continue
		}
		d.blocked = 0
		if moved >= budget {
			d.more = true
			l.requeue(f) // whoever called (an event, a note, a recheck)
			return nil
		}
		if err := l.pipes.hold(&d.p); err != nil {
			return err
		}
		if l.kbuf == nil {
			l.kbuf = make([]byte, copyBuf)
		}
		n, err := recvNow(src, l.kbuf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN, err == nil && n == 0:
			l.pipes.release(&d.p) // empty: drained above
			if err == nil && d.read < f.kern.Passed(s) {
				// The FIN came, but passed bytes are still on their way to the receive
				// queue (behind the segments the socket's psock sends, on its work
				// queue): they come, and wake the loop, later.
				l.await(f, d, now)
				return nil
			}
			if err == nil {
				// EOF, and every passed byte sent: what is left is the redirected ones.
				d.hup = true
				d.passing = false
				return l.endDir(f, s, now)
			}
			if d.read == f.kern.Passed(s) && !f.kern.Passing(s) {
				return l.leavePass(f, s, now)
			}
			return nil
		case err != nil:
			return fmt.Errorf("receive: %w", err)
		}
		d.read += uint64(n)
		if err := writeAll(d.p.w, l.kbuf[:n]); err != nil {
			return fmt.Errorf("pipe: %w", err)
		}
		d.p.buffered += n
		moved += n
	}
}

// kernelActive reports whether the kernel moved bytes of f since the last sweep.
func (f *relayFlow) kernelActive() bool {
	var sum uint64
	for s := range f.dir {
		sum += f.kern.Redirected(s) + f.kern.Passed(s)
	}
	if sum == f.ksum {
		return false
	}
	f.ksum = sum
	return true
}

// kernelResult is the result of a kernel flow: what the loop moved plus what the kernel
// redirected.
func (f *relayFlow) kernelResult(err error) result {
	return result{up: f.dir[0].n + int64(f.kern.Redirected(0)), down: f.dir[1].n + int64(f.kern.Redirected(1)), err: err}
}

var errShortPipeWrite = errors.New("short write")
