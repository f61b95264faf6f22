package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// startDante runs Debian's danted in inet and waits until it accepts.
func (l *Lab) startDante(ctx context.Context) error {
	dir, err := os.MkdirTemp("", l.id+"-dante-")
	if err != nil {
		return fmt.Errorf("dante directory: %w", err)
	}
	l.addUndo(func() error { return os.RemoveAll(dir) })
	conf := filepath.Join(dir, "danted.conf")
	if err := os.WriteFile(conf, []byte(danteConfig()), 0o644); err != nil {
		return fmt.Errorf("dante config: %w", err)
	}
	// Not bound to ctx: the lab stops it.
	cmd := exec.Command("ip", "netns", "exec", l.inet.Name(), "danted", "-f", conf, "-p", filepath.Join(dir, "danted.pid"))
	p, err := StartProcess("danted", cmd)
	if err != nil {
		return err
	}
	l.dante = p
	l.addUndo(func() error {
		start := time.Now()
		err := p.Stop(300 * time.Millisecond)
		l.logf("lab %s: danted stopped in %v", l.id, time.Since(start).Round(time.Millisecond))
		return err
	})

	// Ready when it accepts.
	deadline := time.Now().Add(10 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := l.inet.Dial(dctx, "tcp", DanteAddr)
		cancel()
		if err == nil {
			c.Close()
			break
		}
		if done, err := p.Exited(); done {
			return fmt.Errorf("danted exited at start (%v):\n%s", err, p.Output())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("danted does not accept on %s: %w\n%s", DanteAddr, err, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.logf("lab %s: danted pid %d serving on %s", l.id, p.PID(), DanteAddr)
	return nil
}

// DantePID is the PID of the danted main process (0 before it started).
func (l *Lab) DantePID() int {
	if l.dante == nil {
		return 0
	}
	return l.dante.PID()
}

// DanteOutput is the last 64 KiB of danted's stderr and stdout.
func (l *Lab) DanteOutput() string {
	if l.dante == nil {
		return ""
	}
	return l.dante.Output()
}
