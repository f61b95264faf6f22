package checkip

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"
)

// exit asks the echo endpoints in order until one answers and judges the address.
func (r *runner) exit(ctx context.Context) ExitCheck {
	var c ExitCheck
	var lastErr string
	for _, u := range r.echo {
		if ctx.Err() != nil {
			break
		}
		at, err := r.fetchEcho(ctx, r.client, u)
		c.Attempts = append(c.Attempts, at)
		if err != nil {
			lastErr = at.Err
			r.log.Debug("echo attempt failed", "url", u, "err", err)
			continue
		}
		c.Address, c.URL = at.Address, u
		break
	}
	a, via, after := c.Address, "", ""
	if a.IsValid() {
		via = fmt.Sprintf("%s via %s", a, c.URL)
		if failed := len(c.Attempts) - 1; failed > 0 {
			after = fmt.Sprintf(" (after %d endpoint%s failed)", failed, plural(failed))
		}
	}
	switch {
	case !a.IsValid() && ctx.Err() != nil:
		c.Status, c.Detail = Unknown, "interrupted before an echo endpoint answered"
	case !a.IsValid():
		c.Status = Unknown
		c.Detail = fmt.Sprintf("no echo endpoint answered (%d tried; last: %s)", len(c.Attempts), lastErr)
	case r.opts.ExpectNot.IsValid() && a == r.opts.ExpectNot:
		c.Status, c.Detail = Fail, via+": this is the --expect-not address"
	case r.opts.Expect.IsValid() && a != r.opts.Expect:
		c.Status, c.Detail = Fail, fmt.Sprintf("%s, expected %s", via, r.opts.Expect)
	case r.opts.Expect.IsValid():
		c.Status, c.Detail = Pass, via+", as expected"
	default:
		c.Status, c.Detail = Pass, via
	}
	c.Detail += after
	return c
}

// fetchEcho asks one echo endpoint. The error is also in the Attempt, as text.
func (r *runner) fetchEcho(ctx context.Context, client *http.Client, u string) (Attempt, error) {
	start := time.Now()
	body, _, err := r.get(ctx, client, u, "text/plain, application/json;q=0.9, */*;q=0.1", MaxEchoBody)
	at := Attempt{URL: u}
	var a netip.Addr
	if err == nil {
		a, err = ParseEcho(body)
	}
	at.Elapsed = time.Since(start)
	if err != nil {
		at.Err = r.describe(err)
		return at, err
	}
	at.Address = a
	return at, nil
}
