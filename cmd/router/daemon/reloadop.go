package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/control"
)

// What the daemon tells of its config and its reloads. Every reload, whatever asked for it
// (SIGHUP, `router reload` over the control channel, an "always" answer that wrote the
// approved rules), goes through applyReload on the daemon's loop, which records the
// outcome: the running config's hash and load time on success, the refusal and its error
// otherwise. `router status`, the metrics (router_reloads_total by outcome) and
// `router reload`'s own answer all read that one record.

// reloadWhy says what asked for a reload, for the log.
type reloadWhy int

const (
	reloadSignal   reloadWhy = iota // SIGHUP (Options.Reload)
	reloadControl                   // `router reload`
	reloadApproval                  // an "always" answer wrote the approved rules
)

// applyReload runs reload on the daemon's loop and records and logs its outcome; it
// returns the config running afterwards and the refusal.
func (d *daemon) applyReload(ctx context.Context, why reloadWhy) (control.ConfigStat, error) {
	err := d.reload(ctx)
	now := time.Now()
	d.mu.Lock()
	if err != nil {
		d.running.Refused++
		d.running.LastRefused = &control.RefusedReload{At: now, Error: err.Error()}
	} else {
		d.running.Reloads++
		d.running.SHA256, d.running.Loaded = d.cfg.SHA256(), now
	}
	cs := d.runningLocked()
	d.mu.Unlock()
	switch {
	case err != nil && why == reloadApproval:
		d.log.Error("reload after an approval failed; the approval holds for this run", "err", err)
	case err != nil:
		d.log.Error("reload failed; the running config stays", "err", err)
	default:
		d.log.Info("reloaded", "config", d.cfg.File, "sha256", d.cfg.SHA256(), "rules", len(d.cfg.Rules), "forwards", len(d.cfg.Forwards))
	}
	return cs, err
}

// runningLocked is a copy of the record; d.mu is held.
func (d *daemon) runningLocked() control.ConfigStat {
	cs := d.running
	if cs.LastRefused != nil {
		r := *cs.LastRefused
		cs.LastRefused = &r
	}
	return cs
}

// reloadRequest is a reload asked over the control channel, answered on reply.
type reloadRequest struct {
	reply chan<- reloadReply
}

type reloadReply struct {
	cs  control.ConfigStat
	err error
}

// errNoLoop answers a reload asked of a daemon whose loop does not run (stopping, or
// started without Run).
var errNoLoop = errors.New("reload: the router is not running its loop (stopping?)")

// Reload asks the daemon's loop for a reload and waits for its outcome (control.Reloader).
func (h *statusHandler) Reload() (control.ConfigStat, error) {
	d := h.d
	if d.reloadReq == nil {
		return control.ConfigStat{}, errNoLoop
	}
	reply := make(chan reloadReply, 1)
	select {
	case d.reloadReq <- reloadRequest{reply: reply}:
	case <-d.looping:
		return control.ConfigStat{}, errNoLoop
	}
	select {
	case r := <-reply:
		return r.cs, r.err
	case <-d.looping:
		return control.ConfigStat{}, errNoLoop
	}
}

var _ control.Reloader = (*statusHandler)(nil)

// loaded is the record of a start on cfg.
func (d *daemon) loaded(cfg *conf.Config) control.ConfigStat {
	return control.ConfigStat{SHA256: cfg.SHA256(), Loaded: time.Now()}
}
