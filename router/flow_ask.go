package router

import (
	"context"
	"errors"
	"time"

	"github.com/agentcage/router/router/ask"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// errAskDenied and errAskTimeout are a held flow's end when it was not approved.
// defaultAskTimeout is conf.DefaultAskTimeout, for Settings built in code.
const defaultAskTimeout = 30 * time.Second

var (
	errAskDenied  = errors.New("ask: denied")
	errAskTimeout = errors.New("ask: no answer in time")
	errNoDesk     = errors.New("ask: nobody to ask (no desk)")
)

// askKey is the destination a flow is asked about: its name when known, else its address,
// and its port.
func askKey(pf *policy.Flow) ask.Key {
	h := pf.Host
	if h == "" {
		h = pf.Dst.Unmap().String()
	}
	return ask.Key{Host: h, Port: pf.Port}
}

// ask holds a flow the policy decided to ask about (d.Action is Ask) until the desk
// answers, and returns the decision that stands: d with the action Proxy when approved
// (through d.Proxy, as the asking rule or [policy] ask_proxy says), else a refusal at
// StepAsk (the refusal reason ask-denied) with f.Err saying why. Nothing is dialled while
// the flow waits; it holds its source's share of the flow budget, never a set-up slot.
func (r *Router) ask(ctx context.Context, p *compiled, f *FlowRecord, pf *policy.Flow, d policy.Decision) policy.Decision {
	a, err := ask.Deny, errNoDesk
	if desk := r.opts.Asks; desk != nil {
		timeout := p.AskTimeout
		if timeout <= 0 {
			timeout = defaultAskTimeout
		}
		a, err = desk.Hold(ctx, askKey(pf), sourceKey(pf, p), d.Name, d.Proxy, timeout)
	}
	f.Asked = a.String()
	if a.Approves() {
		d.Action = rules.Proxy
		return d
	}
	switch {
	case err != nil:
		f.Err = err
	case a == ask.Timeout:
		f.Err = errAskTimeout
	default:
		f.Err = errAskDenied
	}
	d.Step, d.Action = policy.StepAsk, rules.Block
	return d
}

// reapprove keeps an approval when the flow is decided again (with what its name resolves
// to): the walls may refuse it now, but an ask is not asked twice.
func reapprove(d policy.Decision, approved bool) policy.Decision {
	if approved && d.Action == rules.Ask {
		d.Action = rules.Proxy
	}
	return d
}
