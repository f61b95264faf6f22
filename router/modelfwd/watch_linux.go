package modelfwd

import (
	"net"
	"sync"
	"time"
)

// watchGone calls gone when the guest on c closes its connection while a request waits on
// the model server (so the server stops working for nobody), checking from watchAfter on.
// The returned stop ends the watch before c is read again. The watch peeks at the socket
// without reading (MSG_PEEK): bytes of a next, pipelined request end the watch, not the
// request.
func watchGone(c *net.TCPConn, gone func()) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		running sync.WaitGroup
	)
	watching := false
	t := time.AfterFunc(watchAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		watching = true
		running.Add(1)
		go func() {
			defer running.Done()
			if peerGone(c) {
				gone()
			}
		}()
	})
	return func() {
		if t.Stop() {
			return
		}
		mu.Lock()
		stopped = true
		w := watching
		mu.Unlock()
		if w {
			c.SetReadDeadline(time.Unix(1, 0)) // ends the peek's wait
			running.Wait()
			c.SetReadDeadline(time.Time{})
		}
	}
}

// peerGone waits until c is readable and reports whether what is there is its end.
func peerGone(c *net.TCPConn) bool { return peekConn(c, true) == peekEnd }
