package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

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

// Process is a server the lab (or a benchmark in it) started; it is ended by its PID and its
// process group, which it leads, never by name. The kernel kills it should the starting
// process die first.
type Process struct {
	Name   string
	cmd    *exec.Cmd
	output *TailBuffer
	done   chan struct{} // closed when Wait returned
	err    error         // Wait's result; read after done
}

// StartProcess starts cmd as name in its own process group, with stdout and stderr kept in
// a 64 KiB tail buffer unless the caller set them.
func StartProcess(name string, cmd *exec.Cmd) (*Process, error) {
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

// Output is the last 64 KiB the process wrote (when StartProcess captured it).
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

// Stop asks the process to end (SIGTERM), kills its whole group after grace, and waits.
// Stopping a stopped process is a no-op.
func (p *Process) Stop(grace time.Duration) error {
	pid := p.PID()
	if done, _ := p.Exited(); !done {
		_ = terminate(pid)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	var errs []error
	// The group outlives its leader (forked children exit lazily): end it. Zombies waiting
	// for init to reap them do not count.
	if err := killGroup(pid); err != nil {
		errs = append(errs, fmt.Errorf("kill %s process group %d: %w", p.Name, pid, err))
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		errs = append(errs, fmt.Errorf("stop %s (pid %d): still running 5 s after SIGKILL", p.Name, pid))
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(groupMembers(pid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m := groupMembers(pid); len(m) > 0 {
		errs = append(errs, fmt.Errorf("stop %s: processes %v of group %d survive SIGKILL", p.Name, m, pid))
	}
	return errors.Join(errs...)
}

// groupMembers lists the running (not zombie) processes of process group pgid, from /proc.
func groupMembers(pgid int) []int {
	var pids []int
	for _, name := range dirNames("/proc") {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ...": comm may hold any byte, so cut at the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" || f[2] != strconv.Itoa(pgid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// danteConfig is danted.conf for the lab: no authentication, internal on DanteAddr, external
// ExitAddr, logging to stderr.
func danteConfig() string {
	host, port, _ := strings.Cut(DanteAddr, ":")
	return fmt.Sprintf(`logoutput: stderr
internal: %s port = %s
external: %s
socksmethod: none
clientmethod: none
user.privileged: root
user.unprivileged: nobody
client pass {
	from: 0.0.0.0/0 to: 0.0.0.0/0
	log: error
}
socks pass {
	from: 0.0.0.0/0 to: 0.0.0.0/0
	command: connect udpassociate bindreply udpreply
	log: connect error
}
`, host, port, ExitAddr)
}
