package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Debian's tinyproxy in inet: the lab's HTTP CONNECT upstream, written by nobody here, with
// Basic credentials, connecting out from an exit address of its own (so that a test tells
// it from the SOCKS proxies by what the echo server sees). It resolves names with the lab's
// DNS server (`ip netns exec` gives it inet's resolv.conf). It is not started by New: a test
// that wants it calls StartTinyproxy, and may stop and start it again to play an upstream
// that dies and comes back.
const (
	// TinyproxyAddr is where tinyproxy listens (TCP; its port is added to the leak
	// counter's proxy ports: the router's connections to it are not leaks).
	TinyproxyAddr = "198.51.100.1:3128"
	// TinyproxyExitAddr (on inet's lo) is the address tinyproxy connects from.
	TinyproxyExitAddr = "203.0.113.51"
)

// TinyproxyOptions configure tinyproxy. With an empty User it asks for no credentials.
type TinyproxyOptions struct {
	User, Password string
}

// Tinyproxy is tinyproxy running (or stopped) in the lab. Its methods are safe for
// concurrent use; the lab's Close stops it.
type Tinyproxy struct {
	l    *Lab
	conf string

	mu sync.Mutex // guards p
	p  *Process   // nil while stopped
}

// StartTinyproxy writes tinyproxy's config, adds its exit address and its port to the leak
// counter's proxy ports, and starts it (see Start).
func (l *Lab) StartTinyproxy(ctx context.Context, opts TinyproxyOptions) (*Tinyproxy, error) {
	if _, err := exec.LookPath("tinyproxy"); err != nil {
		return nil, fmt.Errorf("lab: tinyproxy not found (Debian: apt-get install tinyproxy): %w", err)
	}
	if strings.ContainsAny(opts.User+opts.Password, " \t\r\n\"") {
		return nil, errors.New("lab: tinyproxy credentials must not hold spaces or quotes")
	}
	dir, err := os.MkdirTemp("", l.id+"-tinyproxy-")
	if err != nil {
		return nil, fmt.Errorf("tinyproxy directory: %w", err)
	}
	l.addUndo(func() error { return os.RemoveAll(dir) })
	t := &Tinyproxy{l: l, conf: filepath.Join(dir, "tinyproxy.conf")}
	if err := os.WriteFile(t.conf, []byte(tinyproxyConfig(opts)), 0o644); err != nil {
		return nil, fmt.Errorf("tinyproxy config: %w", err)
	}
	_, port, _ := strings.Cut(TinyproxyAddr, ":")
	if err := l.run(ctx, "", "ip", "-n", l.inet.name, "addr", "replace", TinyproxyExitAddr+"/32", "dev", "lo"); err != nil {
		return nil, fmt.Errorf("tinyproxy exit address: %w", err)
	}
	if err := l.run(ctx, "", "ip", "netns", "exec", l.inet.name, "nft", "add", "element", "inet", LeakTable, "proxy_ports", "{ "+port+" }"); err != nil {
		return nil, fmt.Errorf("tinyproxy port in the leak counter: %w", err)
	}
	l.addUndo(t.Stop)
	if err := t.Start(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// tinyproxyConfig is tinyproxy's configuration: every connect port allowed (no ConnectPort
// line), no Via header, logs on its standard output.
func tinyproxyConfig(opts TinyproxyOptions) string {
	host, port, _ := strings.Cut(TinyproxyAddr, ":")
	c := fmt.Sprintf(`# written by the router lab
User nobody
Group nogroup
Port %s
Listen %s
Bind %s
Timeout 30
MaxClients 64
DisableViaHeader Yes
LogLevel Connect
`, port, host, TinyproxyExitAddr)
	if opts.User != "" {
		c += fmt.Sprintf("BasicAuth %s %s\n", opts.User, opts.Password)
	}
	return c
}

// Start starts tinyproxy in the foreground of its own process group and waits until it
// accepts; it does nothing when tinyproxy runs.
func (t *Tinyproxy) Start(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p != nil {
		return nil
	}
	cmd := exec.Command("ip", "netns", "exec", t.l.inet.name, "tinyproxy", "-d", "-c", t.conf)
	p, err := StartProcess("tinyproxy", cmd)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := t.l.inet.Dial(dctx, "tcp", TinyproxyAddr)
		cancel()
		if err == nil {
			c.Close()
			break
		}
		if done, werr := p.Exited(); done {
			return fmt.Errorf("tinyproxy exited at start (%v):\n%s", werr, p.Output())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Stop(300 * time.Millisecond)
			return fmt.Errorf("tinyproxy does not accept on %s: %w\n%s", TinyproxyAddr, err, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.p = p
	t.l.logf("lab %s: tinyproxy pid %d serving on %s, leaving from %s", t.l.id, p.PID(), TinyproxyAddr, TinyproxyExitAddr)
	return nil
}

// Stop ends tinyproxy by its PID and process group (connections through it die with it); it
// does nothing when tinyproxy is stopped.
func (t *Tinyproxy) Stop() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p == nil {
		return nil
	}
	err := t.p.Stop(300 * time.Millisecond)
	t.p = nil
	return err
}

// Output is the last 64 KiB tinyproxy wrote since its last Start ("" while stopped).
func (t *Tinyproxy) Output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p == nil {
		return ""
	}
	return t.p.Output()
}
