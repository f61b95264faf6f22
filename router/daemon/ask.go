package daemon

import (
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/router/control"
)

// newDesk is the daemon's desk for flows held under ask: "always" answers are written to
// the router's own rules file (conf.WriteApproval, beside the config or where [policy]
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
		return control.Prompt{}, errBadAnswer(answer)
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

type errBadAnswer string

func (e errBadAnswer) Error() string {
	return "answer " + string(e) + ": not once, run, always or deny"
}

var errNoAsk = errString("answer: this daemon asks nothing")

type errString string

func (e errString) Error() string { return string(e) }

var _ control.Asker = (*statusHandler)(nil)
