package router

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
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

// hold makes *p a pipe of the pool's (a new one when none is free) unless it holds one
// already: a flow's direction holds a pipe only while it moves bytes.
func (pp *pipePool) hold(p **pipe) error {
	if *p != nil {
		return nil
	}
	np, err := pp.get()
	if err != nil {
		return err
	}
	*p = np
	return nil
}

// release puts the pipe *p holds back (put), if it holds one, and clears *p.
func (pp *pipePool) release(p **pipe) {
	if *p != nil {
		pp.put(*p)
		*p = nil
	}
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
