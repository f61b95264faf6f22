package bench

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"time"
)

// Process is a server the benchmark started. It is ended by its PID (and its process group,
// which it leads), never by name.
type Process struct {
	Name   string
	cmd    *exec.Cmd
	output *TailBuffer
	done   chan struct{} // closed when Wait returned
	err    error         // Wait's result; read after done
}

// Start starts cmd as Name in its own process group, with stdout and stderr kept in a tail
// buffer (unless the caller set them), and asks the kernel to kill it should this process
// die first (Linux).
func Start(name string, cmd *exec.Cmd) (*Process, error) {
	p := &Process{Name: name, cmd: cmd, output: &TailBuffer{Max: 64 << 10}, done: make(chan struct{})}
	cmd.SysProcAttr = daemonAttr()
	if cmd.Stdout == nil {
		cmd.Stdout = p.output
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.output
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Output is the last 64 KiB the process wrote (when Start captured it).
func (p *Process) Output() string { return p.output.String() }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, then after grace SIGKILL to the process group, and waits (5 s at most
// after the kill). Stopping a stopped process does nothing.
func (p *Process) Stop(grace time.Duration) error {
	if done, _ := p.Exited(); done {
		return nil
	}
	_ = signalPID(p.PID(), false)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := signalPID(p.PID(), true); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("stop " + p.Name + ": still running 5 s after SIGKILL")
	}
}

// TailBuffer keeps the last Max bytes written to it; safe for concurrent use.
type TailBuffer struct {
	Max int
	mu  sync.Mutex // guards buf
	buf []byte
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.Max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
