package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/upstreamtest"
)

// The tests of this file run in synctest bubbles: time is a fake clock that
// moves only when every goroutine of the test waits, so backoffs, probe
// periods and latencies are exact.

// nopConn is a connection that does nothing, for fakes that succeed.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }

var dst = upstream.Addr{Name: "example.com", Port: 443}

func mustTrack(t *testing.T, u upstream.Upstream, cfg upstream.HealthConfig) *upstream.Tracked {
	t.Helper()
	tr, err := upstream.Track(u, cfg, nil)
	if err != nil {
		t.Fatalf("Track: %v", err)
	}
	return tr
}

func TestTrackedOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var next error // what Connect returns after 30ms
		f := &upstreamtest.Fake{ID: "exit", ConnectFunc: func(ctx context.Context, _ upstream.Addr, _ []byte) (net.Conn, error) {
			time.Sleep(30 * time.Millisecond) // not ordering: the connect's latency, on the bubble's fake clock
			if next != nil {
				return nil, next
			}
			return nopConn{}, nil
		}}
		tr := mustTrack(t, f, upstream.HealthConfig{Backoff: time.Second, MaxBackoff: 4 * time.Second})
		start := time.Now()
		if s := tr.Status(); s.State != upstream.Unknown || s.Name != "exit" || !s.Since.IsZero() {
			t.Fatalf("new: %+v", s)
		}
		connect := func(err error) upstream.Status {
			t.Helper()
			next = err
			_, _ = tr.Connect(context.Background(), dst, nil)
			return tr.Status()
		}
		down := upstreamtest.Failure("exit", false)

		s := connect(nil)
		if s.State != upstream.Up || s.Latency != 30*time.Millisecond || !s.Since.Equal(start.Add(30*time.Millisecond)) {
			t.Errorf("after a success: %+v, want up with latency 30ms", s)
		}
		s = connect(down)
		if s.State != upstream.Down || s.Failures != 1 || time.Until(s.RetryAt) != time.Second ||
			!strings.Contains(s.LastError, "fake: proxy down") || s.Latency != 30*time.Millisecond {
			t.Errorf("after a failure: %+v", s)
		}
		s = connect(fmt.Errorf("dial: %w", context.Canceled))
		if s.State != upstream.Down || s.Failures != 1 {
			t.Errorf("a canceled call changed the state: %+v", s)
		}
		s = connect(upstreamtest.Failure("exit", true))
		if s.State != upstream.Up || s.Failures != 0 || s.Latency != 30*time.Millisecond || s.LatencyAt.Equal(time.Now()) {
			t.Errorf("after a refusal: %+v, want up with the old latency", s)
		}
		for range 4 {
			s = connect(down)
		}
		if s.Failures != 4 || time.Until(s.RetryAt) != 4*time.Second {
			t.Errorf("after 4 failures: %+v, want the backoff capped at 4s", s)
		}
	})
}

func TestTrackedAssociateUnsupportedCountsNothing(t *testing.T) {
	f := &upstreamtest.Fake{ID: "web", AssociateFunc: func(context.Context) (upstream.Association, error) {
		return nil, &upstream.Error{Upstream: "web", Op: "associate", Err: upstream.ErrUDPUnsupported}
	}}
	tr := mustTrack(t, f, upstream.HealthConfig{})
	if _, err := tr.Associate(context.Background()); !errors.Is(err, upstream.ErrUDPUnsupported) {
		t.Fatalf("Associate: %v", err)
	}
	if s := tr.Status(); s.State != upstream.Unknown {
		t.Errorf("state %v, want unknown", s.State)
	}
}

func TestTrackConfig(t *testing.T) {
	f := &upstreamtest.Fake{ID: "x"}
	tests := []struct {
		cfg  upstream.HealthConfig
		want string
	}{
		{upstream.HealthConfig{Every: time.Second}, "upstream x: a probe needs a target host:port"},
		{upstream.HealthConfig{Every: time.Second, Target: upstream.Addr{Name: "a"}}, "upstream x: a probe needs a target host:port"},
		{upstream.HealthConfig{Every: -time.Second}, "upstream x: probe period -1s is negative"},
		{upstream.HealthConfig{Backoff: time.Minute, MaxBackoff: time.Second}, "upstream x: max backoff 1s is shorter than backoff 1m0s"},
	}
	for _, tt := range tests {
		if _, err := upstream.Track(f, tt.cfg, nil); err == nil || err.Error() != tt.want {
			t.Errorf("Track(%+v): %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestTrackedProbe runs the probe loop on a fake clock: a probe at once,
// then every 30s, each bounded by its timeout; a refused probe counts
// against the upstream; canceling Run's context ends it.
func TestTrackedProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		target := upstream.Addr{Name: "probe.example", Port: 80}
		var mode atomic.Int32 // 0 ok, 1 refused, 2 hang until the deadline
		var times []time.Duration
		start := time.Now()
		f := &upstreamtest.Fake{ID: "exit", ConnectFunc: func(ctx context.Context, d upstream.Addr, _ []byte) (net.Conn, error) {
			if d != target {
				t.Errorf("probe to %v, want %v", d, target)
			}
			times = append(times, time.Since(start))
			time.Sleep(10 * time.Millisecond) // not ordering: the probe's latency, on the bubble's fake clock
			switch mode.Load() {
			case 1:
				return nil, upstreamtest.Failure("exit", true)
			case 2:
				<-ctx.Done()
				return nil, &upstream.Error{Upstream: "exit", Op: "connect", Err: ctx.Err()}
			}
			return nopConn{}, nil
		}}
		tr := mustTrack(t, f, upstream.HealthConfig{Every: 30 * time.Second, Target: target, Timeout: 5 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			tr.Run(ctx)
			close(done)
		}()
		until := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) } // not ordering: moves the bubble's fake clock to d
		until(20 * time.Millisecond)
		if s := tr.Status(); s.State != upstream.Up || s.Latency != 10*time.Millisecond {
			t.Errorf("after the first probe: %+v", s)
		}
		mode.Store(1)
		until(30*time.Second + 20*time.Millisecond)
		if s := tr.Status(); s.State != upstream.Down || !strings.Contains(s.LastError, "destination refused") {
			t.Errorf("after a refused probe: %+v, want down", s)
		}
		mode.Store(2)
		until(66 * time.Second)
		if s := tr.Status(); s.State != upstream.Down || s.Failures != 2 || !strings.Contains(s.LastError, "deadline exceeded") {
			t.Errorf("after a probe that timed out: %+v", s)
		}
		if got := s2(tr.Status().LastErrorAt.Sub(start)); got != "65.00s" {
			t.Errorf("the timed-out probe failed at %s, want 65.00s (60s + 5s timeout)", got)
		}
		mode.Store(0)
		until(90*time.Second + 20*time.Millisecond)
		if s := tr.Status(); s.State != upstream.Up {
			t.Errorf("after a good probe: %+v", s)
		}
		cancel()
		<-done
		want := []time.Duration{0, 30 * time.Second, 60 * time.Second, 90 * time.Second}
		if fmt.Sprint(times) != fmt.Sprint(want) {
			t.Errorf("probes at %v, want %v", times, want)
		}
	})
}

func s2(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// TestTrackedRunWithoutPeriod returns at once.
func TestTrackedRunWithoutPeriod(t *testing.T) {
	tr := mustTrack(t, &upstreamtest.Fake{ID: "x"}, upstream.HealthConfig{})
	tr.Run(context.Background())
	if err := tr.Probe(context.Background()); err == nil || err.Error() != "upstream x: no probe target" {
		t.Errorf("Probe without a target: %v", err)
	}
}
