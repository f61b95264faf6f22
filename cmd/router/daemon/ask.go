package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/agentcage/router/cmd/router/console"
	"github.com/agentcage/router/internal/netaddr"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/router/control"
)

// newDesk is the daemon's desk for flows held under ask: "always" answers are written to
// the router's own rules file (conf.WriteApproval, in the state directory or where [policy]
// approved says) and a reload reads them; every answer is logged. The desk lives as long
// as the daemon: a reload keeps the prompts and the answers for the run.
func (d *daemon) newDesk() *ask.Desk {
	return ask.New(ask.Options{
		MaxPerSource: conf.DefaultMaxHeldPerSource,
		MaxTotal:     conf.DefaultMaxHeld,
		Always: func(p ask.Prompt, by string) error {
			d.mu.Lock()
			cfg := d.cfg
			d.mu.Unlock()
			path := cfg.Policy.ApprovedPath(cfg.File)
			if err := conf.WriteApproval(path, conf.Approval{Host: p.Host, Port: p.Port, Proxy: p.Proxy, At: time.Now(), By: by}); err != nil {
				return err
			}
			select {
			case d.reloadNow <- struct{}{}:
			default: // one is queued already
			}
			return nil
		},
		Answered: func(p ask.Prompt, a ask.Answer, by string) {
			d.log.Info("ask answered", "id", p.ID, "host", p.Host, "port", p.Port, "rule", p.Rule, "answer", a.String(), "by", by, "held", p.Held)
		},
	})
}

// Pending lists the prompts for the control channel.
func (h *statusHandler) Pending() []control.Prompt {
	if h.d.desk == nil {
		return nil
	}
	ps := h.d.desk.Pending()
	out := make([]control.Prompt, len(ps))
	for i, p := range ps {
		out[i] = controlPrompt(p)
	}
	return out
}

// Answer answers a prompt for the control channel.
func (h *statusHandler) Answer(id uint64, answer, by string) (control.Prompt, error) {
	a, ok := ask.ParseAnswer(answer)
	if !ok {
		return control.Prompt{}, fmt.Errorf("answer %q: not once, run, always or deny", answer)
	}
	if h.d.desk == nil {
		return control.Prompt{}, errNoAsk
	}
	p, err := h.d.desk.Answer(id, a, by)
	return controlPrompt(p), err
}

func controlPrompt(p ask.Prompt) control.Prompt {
	return control.Prompt{ID: p.ID, Host: p.Host, Port: p.Port, Rule: p.Rule, Proxy: p.Proxy, Sources: p.Sources,
		Held: p.Held, Since: p.Since, Until: p.Until}
}

var errNoAsk = errors.New("answer: this daemon asks nothing")

var _ control.Asker = (*statusHandler)(nil)

// startConsole serves the web console when [console] listen is set. A console that cannot
// listen is logged, not fatal (the data path matters more), as the control channel.
func (d *daemon) startConsole(cfg *conf.Config) {
	if !cfg.Console.Listen.IsValid() {
		return
	}
	ln, err := net.Listen("tcp", cfg.Console.Listen.String())
	if err != nil {
		d.log.Warn("no console", "listen", cfg.Console.Listen, "err", err)
		return
	}
	listen := netaddr.AddrPort(ln.Addr())
	c := console.New(consoleHandler{d.status}, console.Options{Listen: listen, Unsafe: cfg.Console.UnsafeListen,
		Log: d.log.With("component", "console"),
		Caged: func(a netip.Addr) bool {
			d.mu.Lock()
			c := d.cfg.Capture
			d.mu.Unlock()
			for _, n := range append(slices.Clip(c.VMNetworks), c.CageSubnets...) {
				if n.Contains(a) {
					return true
				}
			}
			return false
		}})
	d.consoleURL = c.URL()
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	d.closers = append(d.closers, srv)
	d.serving.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("console", "err", err)
		}
	})
	d.log.Info("console listening", "listen", listen, "how", "router console prints its URL")
}

// ConsoleURL is the console's URL with its token, for `router console`; "" when off.
func (h *statusHandler) ConsoleURL() string { return h.d.consoleURL }
