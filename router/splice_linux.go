package router

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Splice moves bytes socket → pipe → socket inside the kernel. Go's own io.Copy between two
// *net.TCPConn splices too, but it takes its pipe before it waits for data, so every quiet
// flow would hold two pipes (four descriptors, two 1 MiB buffers). Here a pipe is taken only
// once the source is readable and given back as soon as the source has nothing more to give.

const (
	pipeSize   = 1 << 20 // F_SETPIPE_SZ; the kernel keeps the default 64 KiB if refused
	spliceFlag = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
)

type pipe struct {
	r, w     int
	buffered int // bytes in the pipe not yet written out
}

// pipePool keeps a few empty pipes for reuse; it is safe for concurrent use.
type pipePool struct {
	mu   sync.Mutex
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

// copy moves s.src to s.dst until EOF (nil), an error, or idleness (errIdle).
func (r *relay) copy(s, other *stream) error {
	srcRC, err := s.src.SyscallConn()
	if err != nil {
		return err
	}
	dstRC, err := s.dst.SyscallConn()
	if err != nil {
		return err
	}
	for {
		if err := s.src.SetReadDeadline(time.Now().Add(r.idle)); err != nil {
			return err
		}
		var (
			p     *pipe
			eof   bool
			opErr error
		)
		err := srcRC.Read(func(fd uintptr) bool {
			for {
				if p == nil {
					if p, opErr = r.pipes.get(); opErr != nil {
						return true
					}
				}
				n, e := unix.Splice(int(fd), nil, p.w, nil, pipeSize, spliceFlag)
				switch {
				case e == unix.EINTR:
					continue
				case e == unix.EAGAIN:
					// Drained: give the (empty) pipe back and wait for more data. A deadline
					// that passes meanwhile is checked against both directions' activity.
					r.pipes.put(p)
					p = nil
					return false
				case e != nil:
					opErr = fmt.Errorf("splice from socket: %w", e)
					return true
				case n == 0:
					eof = true
					return true
				}
				p.buffered += int(n)
				if opErr = r.drain(p, s.dst, dstRC); opErr != nil {
					return true
				}
				s.n.Add(n)
				s.last.Store(time.Now().UnixNano())
			}
		})
		if p != nil {
			r.pipes.put(p)
		}
		switch {
		case opErr != nil:
			return opErr
		case eof:
			return nil
		case err == nil:
		case isTimeout(err):
			if r.timedOut(s, other) {
				return errIdle
			}
		default:
			return err
		}
	}
}

// drain writes the pipe's bytes to dst, waiting for dst to take them.
func (r *relay) drain(p *pipe, dst *net.TCPConn, dstRC interface {
	Write(func(uintptr) bool) error
}) error {
	if err := dst.SetWriteDeadline(time.Now().Add(r.idle)); err != nil {
		return err
	}
	var opErr error
	err := dstRC.Write(func(fd uintptr) bool {
		for p.buffered > 0 {
			n, e := unix.Splice(p.r, nil, int(fd), nil, p.buffered, spliceFlag)
			switch {
			case e == unix.EINTR:
				continue
			case e == unix.EAGAIN:
				return false
			case e != nil:
				opErr = fmt.Errorf("splice to socket: %w", e)
				return true
			}
			p.buffered -= int(n)
		}
		return true
	})
	if err != nil {
		if isTimeout(err) {
			return errors.Join(errIdle, errors.New("the receiver took nothing"))
		}
		return err
	}
	return opErr
}

func newRelayPipes() *pipePool { return newPipePool(64) }
