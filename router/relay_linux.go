package router

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/router/sockmap"
	"github.com/agentcage/router/router/upload"
	"golang.org/x/sys/unix"
)

// The Linux loop set relays every flow on a few epoll loops (one per GOMAXPROCS), the way
// redsocks does on libevent, and moves the bytes with splice: socket → pipe → socket inside
// the kernel. A flow handed to the loops leaves Go's poller (its descriptors are duplicated
// and the *net.TCPConn closed), so a relayed flow holds no goroutine, no stack and no
// buffer: about the size of one relayFlow while it is quiet. A pipe is taken only once the
// source has bytes and given back as soon as the source has nothing more to give and the
// pipe is empty (a receiver that does not take its bytes keeps the pipe that holds them).
//
// Each loop owns its flows: only the loop's goroutine touches an relayFlow after add, so the
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

// loopSet is the set of loops of one Router. Its methods are safe for concurrent use.
type loopSet struct {
	pipes  *pipePool
	next   atomic.Uint32
	setups atomic.Uint64 // flows the loops set up themselves, to a connect (loop_setup_linux.go)
	kernel kernel        // the sockmap, loaded when a flow first asks for it

	mu     sync.Mutex // guards loops and closed
	loops  []*loop    // started on first use
	closed bool
}

// newLoopSet returns a loop set that logs to log (nil: nowhere) the one time the sockmap
// cannot be loaded.
func newLoopSet(log *slog.Logger) *loopSet {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &loopSet{pipes: newPipePool(64)}
	e.kernel = kernel{log: log, e: e, after: kernelAfter}
	return e
}

// loop returns the loop for a new flow, starting the loops on first use.
func (e *loopSet) loop() (*loop, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	if e.loops == nil {
		n := runtime.GOMAXPROCS(0)
		for i := range n {
			l, err := newLoop(e.pipes, &e.kernel, i, n)
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

// all returns every loop, starting them on first use.
func (e *loopSet) all() ([]*loop, error) {
	if _, err := e.loop(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	return e.loops, nil
}

// Close ends the flows still running (with errClosed), stops the loops and releases the
// pipes. Flows started afterwards fail at once.
func (e *loopSet) Close() {
	e.mu.Lock()
	loops := e.loops
	e.loops, e.closed = nil, true
	e.mu.Unlock()
	for _, l := range loops {
		l.stop()
	}
	e.kernel.close()
	e.pipes.Close()
}

// start hands a and b to a loop; done is called once, after both descriptors are closed,
// on the loop's goroutine or the caller's: it must not block. A b that is not a TCP
// connection (TLS to an https proxy), and a flow whose upload budget may hold it while
// asking (upload.Flow.Holds), are relayed by copyRelay instead.
func (r *relay) start(a *net.TCPConn, bc net.Conn, m *meter, done func(result)) {
	b, ok := bc.(*net.TCPConn)
	if !ok || m.upload.Holds() {
		r.copyRelay(a, asHalfCloser(bc), m, done)
		return
	}
	fa, errA := detach(a)
	fb, errB := detach(b)
	l, err := r.loops.loop()
	if err = errors.Join(errA, errB, err); err != nil {
		for _, fd := range []int{fa, fb} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		done(result{err: err})
		return
	}
	r.begin(l, &relayFlow{fd: [2]int{fa, fb}}, m, done, false)
}

// begin relays f, whose descriptors are set (fd[0] the client side, fd[1] the upstream
// side), on l: the loops' one entry for a flow's descriptors, whoever set the flow up. own
// is true when l set the flow up itself: f is then registered on l already and begin runs on
// l's goroutine; otherwise l.add registers it. done is as for start.
func (r *relay) begin(l *loop, f *relayFlow, m *meter, done func(result), own bool) {
	f.idle, f.done = r.idle, done
	f.dir[0].live, f.dir[1].live = &m.up, &m.down
	f.dir[0].upload = m.upload
	f.cut = &m.cut
	// Watched once f is on l (at the return: a flow stopped before it started is ended by
	// l's next wake-up).
	defer m.watchCut(func() {
		l.mu.Lock()
		l.cutDue = true
		l.wake()
		l.mu.Unlock()
	})
	end := func(err error) {
		if own {
			l.finish(f, err)
			return
		}
		f.release(l.pipes)
		done(result{up: f.dir[0].n, down: f.dir[1].n, err: err})
	}
	// Move what is already there (the client's request, typically) at once, before waiting
	// for the loop: one wake-up less on the way of the first bytes.
	now := l.now()
	for s := range f.dir {
		if err := l.pump(f, &f.dir[s], f.fd[s], f.fd[1-s], now); err != nil {
			end(err)
			return
		}
	}
	if f.dir[0].finished && f.dir[1].finished {
		end(nil)
		return
	}
	if r.sockmap && m.upload == nil { // the kernel's bytes pass no upload budget: spliced
		// Same rule on both paths: the flow enters the sockmap at its start, both
		// directions between segments, or after kernelAfter bytes (promote).
		switch {
		case r.loops.kernel.after > 0:
			f.meter, f.wantKernel = m, true // promote
		case !f.dir[0].idle() || !f.dir[1].idle():
		case own:
			if err := l.intoKernel(f, m); err != nil {
				end(err)
				return
			}
		default:
			l.toKernel(f, m) // l.add registers it as a kernel flow
		}
	}
	if own {
		f.last = now
		l.setTick(f.idle)
		return
	}
	l.add(f)
}

// release closes f's descriptors (which takes them out of any epoll) and gives its pipes
// back.
func (f *relayFlow) release(pipes *pipePool) {
	f.closed = true
	closeFD(f.fd[0])
	closeFD(f.fd[1])
	for i := range f.dir {
		pipes.release(&f.dir[i].p)
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

// relayFlow is one relayed flow. After add, only its loop's goroutine touches it.
type relayFlow struct {
	slot   int32
	fd     [2]int  // 0: client side (a), 1: upstream side (b)
	dir    [2]edir // dir[s] is the direction whose source is fd[s]: 0 is up, 1 is down
	idle   time.Duration
	last   time.Duration // loop clock of the last byte moved either way
	done   func(result)
	cut    *atomic.Bool // set when a reload's rules refuse the flow: the loop ends it
	closed bool
	again  bool          // queued to go on after the batch
	setup  *setupFlow    // the loop is setting the flow up (loop_setup_linux.go); nil once it relays
	keep   time.Duration // loop clock at which the sweep sets keep-alive (keepAfter); 0: set

	// A flow in the sockmap (relay_kernel_linux.go); kern is nil for a spliced one.
	kern       *sockmap.Flow
	meter      *meter // the flow's, when wantKernel
	wantKernel bool   // the relay asked for the sockmap: the flow goes in after kernelAfter bytes
	waiting    bool   // on the loop's list of flows waiting for a psock to drain
	ksum       uint64 // the kernel's counters at the last sweep
}

// edir is one direction of a flow.
type edir struct {
	p        *pipe // nil while no bytes are in flight
	n        int64
	live     *atomic.Int64 // the flow's meter: n as it grows
	upload   *upload.Flow  // the up direction's upload budget; nil: none (see meter)
	eof      bool          // the source reached EOF
	finished bool          // EOF passed on (dst half-closed)
	blocked  time.Duration // loop clock when dst refused bytes; 0 when it takes them
	more     bool          // stopped at the budget with the source maybe still readable
	dry      bool          // the last read from the source ended with EAGAIN (no segment half read)

	// Of a kernel flow's direction.
	hup     bool   // the source reported EOF (EPOLLRDHUP), to pass on once drained
	passing bool   // the program passes this direction: the loop copies it
	drained bool   // passing, and dst took every byte redirected before trip
	trip    uint32 // the program's trip count drained is about
	sent    uint64 // bytes the loop wrote to dst since the flow entered the sockmap
	read    uint64 // bytes the loop read from src since then (passed ones)
}
