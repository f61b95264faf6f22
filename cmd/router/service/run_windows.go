//go:build windows

package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/windows/svc"
)

// Daemon is the service's body. It runs until ctx is done (then returns nil after a clean
// stop), reloads on each value of reload, and calls armed once the capture is armed: the
// guard reconciled, listeners and WinDivert open, the engine reading, the guard's permits
// added. Until armed is called the service manager sees "start pending"; afterwards
// "running". armed may be called from any goroutine, more than once (only the first
// counts), and is never nil. Returning an error (or nil without being stopped) makes the
// service exit with a service-specific failure, so the manager's recovery actions restart
// it; the daemon must have dropped its permits first.
type Daemon func(ctx context.Context, reload <-chan struct{}, armed func()) error

// RunOptions configure RunDaemon.
type RunOptions struct {
	// Name is the service's name; "" means Name.
	Name string
	// StartTimeout bounds "start pending": a daemon that has not called armed by then is
	// cancelled and the service fails (and is restarted). Zero means 2 minutes.
	StartTimeout time.Duration
	// CheckpointEvery is how often a pending start or stop is renewed with a new
	// checkpoint (the wait hint gives the manager twice that). Zero means 2 s.
	CheckpointEvery time.Duration
}

// RunDaemon runs d as the service until the service control manager stops it or d ends.
func RunDaemon(o RunOptions, d Daemon) error {
	if o.Name == "" {
		o.Name = Name
	}
	return svc.Run(o.Name, newHandler(o, d))
}

// RunFunc is a daemon that does not report when its capture is armed.
type RunFunc func(ctx context.Context, reload <-chan struct{}) error

// Run runs fn as the service, reporting "running" as soon as fn starts, before any
// capture exists.
//
// Deprecated: use RunDaemon and call armed once the capture is armed.
func Run(fn RunFunc) error {
	return RunDaemon(RunOptions{}, func(ctx context.Context, reload <-chan struct{}, armed func()) error {
		armed()
		return fn(ctx, reload)
	})
}

// checkpointEvery is how often "start pending" and "stop pending" are renewed with a new
// checkpoint by default; the wait hint gives the manager twice that.
const checkpointEvery = 2 * time.Second

func newHandler(o RunOptions, d Daemon) *handler {
	if o.StartTimeout == 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = checkpointEvery
	}
	return &handler{daemon: d, startTimeout: o.StartTimeout, every: o.CheckpointEvery}
}

// handler is the service control handler: Stop and Shutdown cancel the daemon's context,
// ParamChange (`sc control router paramchange`) reloads the config.
type handler struct {
	daemon       Daemon
	startTimeout time.Duration
	every        time.Duration // checkpoint period
}

// stopPending reports "stop pending" with a new checkpoint every h.every until the daemon
// ends (a stop waits for Windows to delete the permits, up to 30 s, and a caller such as
// `router service upgrade` waits on the checkpoints), and returns the daemon's error.
func (h *handler) stopPending(status chan<- svc.Status, done <-chan error) error {
	hint := uint32(2 * h.every / time.Millisecond)
	checkpoint := uint32(1)
	status <- svc.Status{State: svc.StopPending, CheckPoint: checkpoint, WaitHint: hint}
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			checkpoint++
			status <- svc.Status{State: svc.StopPending, CheckPoint: checkpoint, WaitHint: hint}
		}
	}
}

// errStartTimeout ends a daemon that did not arm in time.
var errStartTimeout = errors.New("service: the capture was not armed in time")

// Execute implements svc.Handler.
func (h *handler) Execute(args []string, requests <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	const accepts = svc.AcceptStop | svc.AcceptShutdown | svc.AcceptParamChange
	checkpoint := uint32(1)
	pending := svc.Status{State: svc.StartPending, CheckPoint: checkpoint, WaitHint: uint32(2 * h.every / time.Millisecond)}
	status <- pending
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	reload := make(chan struct{}, 1)
	done := make(chan error, 1)
	armedCh := make(chan struct{})
	var once sync.Once
	armed := func() { once.Do(func() { close(armedCh) }) }
	go func() { done <- h.daemon(ctx, reload, armed) }()

	tick := time.NewTicker(h.every)
	defer tick.Stop()
	deadline := time.NewTimer(h.startTimeout)
	defer deadline.Stop()
	running := false
	current := pending
	stopped := false
	// exit is the exit code for the daemon's end: success only after a requested stop.
	exit := func(err error) (bool, uint32) {
		if err != nil || !stopped {
			return true, 1
		}
		return false, 0
	}
	for {
		select {
		case <-armedCh:
			armedCh = nil
			running = true
			current = svc.Status{State: svc.Running, Accepts: accepts}
			status <- current
		case <-tick.C:
			if !running {
				checkpoint++
				current = svc.Status{State: svc.StartPending, CheckPoint: checkpoint, WaitHint: pending.WaitHint}
				status <- current
			}
		case <-deadline.C:
			if !running {
				cancel(errStartTimeout)
				h.stopPending(status, done)
				return exit(errStartTimeout)
			}
		case err := <-done:
			// The daemon ended by itself: a failure, so the recovery actions restart it.
			status <- svc.Status{State: svc.StopPending}
			return exit(errors.Join(err, errors.New("service: the daemon ended by itself")))
		case r := <-requests:
			switch r.Cmd {
			case svc.Interrogate:
				status <- current
			case svc.Stop, svc.Shutdown:
				stopped = true
				cancel(nil)
				return exit(h.stopPending(status, done))
			case svc.ParamChange:
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		}
	}
}
