package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Group is an ordered failover list of upstreams (a rule's
// proxy = ["primary", "backup"]); a Group of one is a plain upstream with
// health. It implements [Upstream]: Connect and Associate go through the
// members, never anywhere else.
//
// Order: the members that are healthy (Up, Unknown, or Down with their
// backoff over and no trial running) come first, in configuration order;
// the members in backoff come after them, also in order. So the first
// healthy member carries the flow, and when every member is down the flow
// still tries each in order rather than fail untried: a proxy that came
// back is found by the next flow, and a flow is never sent direct.
//
// Retry: when a member fails, the flow tries the next one, within the
// flow's own deadline, unless the failure says that trying elsewhere is
// wrong or useless: the proxy refused the destination (Error.Refused: the
// next proxy would most likely say the same, and the flow fails as it
// would with one proxy), the client's early bytes may already have reached
// the destination (Error.Sent: a retry could deliver them twice), or ctx
// ended. When ctx has a deadline and members remain untried, a member gets
// half of the time left, so a proxy that black-holes the connection leaves
// time for the next one.
type Group struct {
	name    string
	members []*Tracked
}

// NewGroup returns the group of members, in order. It needs at least one,
// and no member twice.
func NewGroup(members ...*Tracked) (*Group, error) {
	if len(members) == 0 {
		return nil, errors.New("upstream group: no member")
	}
	names := make([]string, len(members))
	for i, m := range members {
		for _, prev := range members[:i] {
			if prev == m || prev.Name() == m.Name() {
				return nil, fmt.Errorf("upstream group: %s is listed twice", m.Name())
			}
		}
		names[i] = m.Name()
	}
	return &Group{name: strings.Join(names, ","), members: members}, nil
}

// Name returns the members' names joined by ",".
func (g *Group) Name() string { return g.name }

// Members returns the members in configuration order. The caller must not
// modify the slice.
func (g *Group) Members() []*Tracked { return g.members }

// Connect is ConnectVia without the member's name.
func (g *Group) Connect(ctx context.Context, dst Addr, early []byte) (net.Conn, error) {
	c, _, err := g.ConnectVia(ctx, dst, early)
	return c, err
}

// ConnectVia connects to dst through the first member that can (see
// [Group] for the order and the retries) and returns the connection and
// that member's name. On failure the error wraps each member's *Error, in
// the order tried.
func (g *Group) ConnectVia(ctx context.Context, dst Addr, early []byte) (net.Conn, string, error) {
	var c net.Conn
	name, err := g.try(ctx, func(ctx context.Context, m *Tracked) (err error) {
		c, err = m.Connect(ctx, dst, early)
		return err
	})
	return c, name, err
}

// Associate is AssociateVia without the member's name.
func (g *Group) Associate(ctx context.Context) (Association, error) {
	a, _, err := g.AssociateVia(ctx)
	return a, err
}

// AssociateVia opens a UDP association through the first member that can,
// in the order and with the retries of ConnectVia. The association stays
// with that member until it ends; the caller then asks the Group again,
// which picks by health anew.
func (g *Group) AssociateVia(ctx context.Context) (Association, string, error) {
	var a Association
	name, err := g.try(ctx, func(ctx context.Context, m *Tracked) (err error) {
		a, err = m.Associate(ctx)
		return err
	})
	return a, name, err
}

// order returns the members to try: healthy first, then the rest, each in
// configuration order. Each member reads its own clock (HealthConfig.Clock).
func (g *Group) order() []*Tracked {
	out := make([]*Tracked, 0, len(g.members))
	var later []*Tracked
	for _, m := range g.members {
		if m.usable() {
			out = append(out, m)
		} else {
			later = append(later, m)
		}
	}
	return append(out, later...)
}

// try runs attempt on the members in order until one succeeds or the
// failure stops the flow, and returns the name of the member that
// succeeded.
func (g *Group) try(ctx context.Context, attempt func(context.Context, *Tracked) error) (string, error) {
	order := g.order()
	var errs attempts
	for i, m := range order {
		mctx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok && i < len(order)-1 {
			mctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
		}
		err := attempt(mctx, m)
		cancel()
		if err == nil {
			return m.Name(), nil
		}
		errs = append(errs, err)
		var ue *Error
		if ctx.Err() != nil || errors.As(err, &ue) && (ue.Refused || ue.Sent) {
			break
		}
	}
	if len(errs) == 1 {
		return "", errs[0]
	}
	return "", errs
}
