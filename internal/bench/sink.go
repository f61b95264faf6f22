package bench

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// maxRequest bounds a request: its line, or the head of its HTTP/1.1 form.
const maxRequest = 512

// sinkChunk is the shared buffer the sink writes from.
const sinkChunk = 1 << 20

// Sink serves the benchmark protocol (see the package comment). Its methods are safe for
// concurrent use; one Sink may serve several listeners.
type Sink struct {
	buf    []byte // read-only after NewSink
	parked atomic.Int64
	// ReadTimeout bounds how long a connection may take to send its request line; zero means
	// no bound (idle flows park for as long as the benchmark holds them).
	ReadTimeout time.Duration
}

// NewSink returns a Sink.
func NewSink() *Sink {
	buf := make([]byte, sinkChunk)
	for i := range buf {
		buf[i] = byte(i)
	}
	return &Sink{buf: buf}
}

// Parked is the number of connections that have sent part of a request line and wait.
func (s *Sink) Parked() int64 { return s.parked.Load() }

// Serve accepts connections on ln and serves each in its own goroutine until ln is closed;
// it then returns nil. Other accept errors (out of descriptors) are retried after a pause.
func (s *Sink) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go s.serveConn(c)
	}
}

func (s *Sink) serveConn(c net.Conn) {
	defer c.Close()
	if s.ReadTimeout > 0 {
		c.SetReadDeadline(time.Now().Add(s.ReadTimeout))
	}
	var req [maxRequest]byte
	n := 0
	parked := false
	for {
		m, err := c.Read(req[n:])
		if m > 0 && !parked {
			parked = true
			s.parked.Add(1)
		}
		n += m
		if i := bytes.IndexByte(req[:n], '\n'); i >= 0 && !bytes.HasSuffix(req[:i], []byte(httpSuffix)) {
			n = i
			break
		}
		if i := bytes.Index(req[:n], []byte("\r\n\r\n")); i >= 0 {
			// The HTTP/1.1 form (Request with a host): its head read whole, the line kept.
			n = bytes.IndexByte(req[:n], '\n') - len(httpSuffix)
			break
		}
		if err != nil || n == len(req) {
			if parked {
				s.parked.Add(-1)
			}
			return
		}
	}
	if parked {
		s.parked.Add(-1)
	}
	line := req[:n]
	switch {
	case bytes.Equal(line, []byte("STAT")):
		c.Write(strconv.AppendInt(nil, s.parked.Load(), 10))
		c.Write([]byte{'\n'})
	case bytes.HasPrefix(line, []byte("GET ")):
		size, err := strconv.ParseInt(string(line[4:]), 10, 64)
		if err != nil || size < 0 {
			return
		}
		c.SetReadDeadline(time.Time{})
		for size > 0 {
			chunk := s.buf[:min(size, int64(len(s.buf)))]
			w, err := c.Write(chunk)
			if err != nil {
				return
			}
			size -= int64(w)
		}
	}
}

// Stat asks the sink at addr (dialed with dial) how many connections are parked.
func Stat(dial func(network, addr string) (net.Conn, error), addr string) (int64, error) {
	c, err := dial("tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("sink stat: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("STAT\n")); err != nil {
		return 0, fmt.Errorf("sink stat: %w", err)
	}
	var buf [32]byte
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(buf[:n])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sink stat: answer %q: %w", buf[:n], err)
	}
	return v, nil
}
