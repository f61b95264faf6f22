package lab

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/syncbuf"
)

// Router is a `router run` process in the lab's host namespace, started by StartRouter. Its
// methods are safe for concurrent use.
type Router struct {
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan struct{}
}

// ReadyLine is what the router logs once its capture is installed.
const ReadyLine = "router running"

// StartRouter runs `bin run --config config` in the host namespace and waits (up to
// timeout) until it logs ReadyLine. The process is stopped by Stop, by its PID; the lab's
// Close also ends it, as every process left in its namespaces.
func (l *Lab) StartRouter(bin, config string, timeout time.Duration) (*Router, error) {
	return l.StartRouterWith(bin, config, timeout)
}

// StartRouterWith is StartRouter with more arguments to `router run` (--learn).
func (l *Lab) StartRouterWith(bin, config string, timeout time.Duration, args ...string) (*Router, error) {
	r := &Router{log: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cmd, err := l.RouterCommand(context.Background(), bin, append([]string{"run", "--config", config}, args...)...)
	if err != nil {
		return nil, err
	}
	r.cmd = cmd
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start router: %w", err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	if err := r.WaitLog(ReadyLine, timeout); err != nil {
		r.Stop(syscall.SIGKILL, time.Second)
		return nil, err
	}
	return r, nil
}

// Log returns everything the router wrote so far.
func (r *Router) Log() string { return r.log.String() }

// PID is the router's process id.
func (r *Router) PID() int { return r.cmd.Process.Pid }

// Exited is closed when the process has ended.
func (r *Router) Exited() <-chan struct{} { return r.exited }

// Signal sends sig to the router.
func (r *Router) Signal(sig syscall.Signal) error { return r.cmd.Process.Signal(sig) }

// WaitLog waits until the router's output holds want; it fails when the router exits first
// or the timeout passes.
func (r *Router) WaitLog(want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.Log(), want) {
		select {
		case <-r.exited:
			return fmt.Errorf("the router exited before saying %q:\n%s", want, r.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router did not say %q within %v:\n%s", want, timeout, r.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Stop sends sig and waits for the process to end; after timeout it kills it and reports
// that sig did not stop it. Stop on a router that already ended returns nil.
func (r *Router) Stop(sig syscall.Signal, timeout time.Duration) error {
	select {
	case <-r.exited:
		return nil
	default:
	}
	r.cmd.Process.Signal(sig)
	select {
	case <-r.exited:
		return nil
	case <-time.After(timeout):
		r.cmd.Process.Kill()
		<-r.exited
		return errors.New("the router did not stop on " + sig.String())
	}
}
