package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/router/upstream/socks5"
)

// Dialer opens the load's connections: from Src (when valid), directly or through the SOCKS5
// server at Socks (when not empty; greeting and CONNECT in lock step, as an application
// using the proxy itself would). The zero Dialer dials directly from any address.
type Dialer struct {
	Socks   string
	Src     netip.Addr
	Timeout time.Duration // per connection setup; default 10 s
}

// Dial connects to target (a literal ip:port).
func (d Dialer) Dial(ctx context.Context, target string) (*net.TCPConn, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	nd := net.Dialer{Timeout: timeout}
	if d.Src.IsValid() {
		nd.LocalAddr = &net.TCPAddr{IP: d.Src.AsSlice()}
	}
	addr := target
	if d.Socks != "" {
		addr = d.Socks
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	if d.Socks == "" {
		return tc, nil
	}
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("socks target: %w", err)
	}
	tc.SetDeadline(time.Now().Add(timeout))
	var cl socks5.Client
	if _, err := cl.Handshake(tc, socks5.Addr{IP: ap.Addr(), Port: ap.Port()}); err != nil {
		tc.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// GetResult is one download.
type GetResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// Get asks the sink at target for n bytes and reads them with 256 KiB reads; the time runs
// from before the connect to EOF. Fewer bytes than asked is an error.
func Get(ctx context.Context, d Dialer, target string, n int64) (GetResult, error) {
	start := time.Now()
	c, err := d.Dial(ctx, target)
	if err != nil {
		return GetResult{}, fmt.Errorf("get: connect: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write(append(strconv.AppendInt([]byte("GET "), n, 10), '\n')); err != nil {
		return GetResult{}, fmt.Errorf("get: request: %w", err)
	}
	buf := make([]byte, 256<<10)
	var got int64
	for {
		m, err := c.Read(buf)
		got += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return GetResult{}, fmt.Errorf("get: read after %d bytes: %w", got, err)
		}
	}
	res := GetResult{Bytes: got, Seconds: time.Since(start).Seconds()}
	if got != n {
		return res, fmt.Errorf("get: %d bytes of %d", got, n)
	}
	return res, nil
}

// RateResult is a run of short connections.
type RateResult struct {
	Count   int     `json:"count"`
	Errors  int     `json:"errors"`
	Seconds float64 `json:"seconds"`
	// Latencies of successful connections in microseconds, connect to EOF.
	P50 float64 `json:"p50_us"`
	P90 float64 `json:"p90_us"`
	P99 float64 `json:"p99_us"`
	Max float64 `json:"max_us"`
	// FirstError describes the first failure, if any.
	FirstError string `json:"first_error,omitempty"`
}

// Rate makes count connections, par at a time: each connects, asks for size bytes and reads
// to EOF. Failed connections are counted, not retried.
func Rate(ctx context.Context, d Dialer, target string, count, par, size int) RateResult {
	return RateRequest(ctx, d, target, Request(size, ""), count, par, size)
}

// httpSuffix ends the request line of Request's HTTP/1.1 form (before its "\n").
const httpSuffix = " HTTP/1.1\r"

// Request is the request for size bytes: "GET size\n", or with a host its HTTP/1.1 form,
// "GET size HTTP/1.1\r\nHost: host\r\n\r\n", which carries a name for a router that reads
// the Host header of a flow (the sink answers both alike).
func Request(size int, host string) []byte {
	if host == "" {
		return []byte("GET " + strconv.Itoa(size) + "\n")
	}
	return []byte("GET " + strconv.Itoa(size) + httpSuffix + "\nHost: " + host + "\r\n\r\n")
}

// RateRequest is Rate with the request req (Request) sent on each connection.
func RateRequest(ctx context.Context, d Dialer, target string, req []byte, count, par, size int) RateResult {
	lat := make([]time.Duration, count)
	var next atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Pointer[string]
	fail := func(err error) {
		errs.Add(1)
		s := err.Error()
		firstErr.CompareAndSwap(nil, &s)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16<<10)
			for {
				i := int(next.Add(1)) - 1
				if i >= count || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				c, err := d.Dial(ctx, target)
				if err != nil {
					fail(err)
					lat[i] = -1
					continue
				}
				c.SetDeadline(t0.Add(30 * time.Second))
				got := 0
				_, err = c.Write(req)
				for err == nil {
					var m int
					m, err = c.Read(buf)
					got += m
				}
				c.Close()
				if err != io.EOF || got != size {
					fail(fmt.Errorf("connection %d: %d of %d bytes: %v", i, got, size, err))
					lat[i] = -1
					continue
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	res := RateResult{Count: count, Errors: int(errs.Load()), Seconds: time.Since(start).Seconds()}
	if p := firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	ok := slices.DeleteFunc(lat, func(d time.Duration) bool { return d <= 0 })
	slices.Sort(ok)
	us := func(q float64) float64 {
		if len(ok) == 0 {
			return 0
		}
		return float64(ok[min(len(ok)-1, int(q*float64(len(ok))))].Nanoseconds()) / 1e3
	}
	res.P50, res.P90, res.P99 = us(0.50), us(0.90), us(0.99)
	if len(ok) > 0 {
		res.Max = float64(ok[len(ok)-1].Nanoseconds()) / 1e3
	}
	return res
}

// IdleSet is a set of open, idle flows; Close ends them.
type IdleSet struct {
	conns []*net.TCPConn
}

// Idle opens n connections to the sink at target, par at a time, and sends "GET 1" without
// the newline on each, so each flow crosses every relay on the way and then parks. On error
// the connections opened so far are closed.
func Idle(ctx context.Context, d Dialer, target string, n, par int) (*IdleSet, error) {
	conns := make([]*net.TCPConn, n)
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := d.Dial(ctx, target)
				if err == nil {
					if _, err = c.Write([]byte("GET 1")); err != nil {
						c.Close()
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("idle flow %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	s := &IdleSet{conns: slices.DeleteFunc(conns, func(c *net.TCPConn) bool { return c == nil })}
	if err := errors.Join(firstErr, ctx.Err()); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Len is the number of open flows.
func (s *IdleSet) Len() int { return len(s.conns) }

// Close closes every flow.
func (s *IdleSet) Close() {
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}
