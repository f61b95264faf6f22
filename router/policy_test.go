package router

import (
	"errors"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestSharedCases: the relay decides the shared flows as the policy, the Windows engine and
// explain do (TCP only: the relay takes no UDP). Every case runs through a router of its
// own: Original, Owner, FromVM and the fake-IP names come from the case; the decision is
// read from the flow's log record.
func TestSharedCases(t *testing.T) {
	dec := casePolicy(t, "shared.toml", policytest.Config, policytest.Env())
	p := startProxy(t, nil, nil) // it dials loopback only: no case's traffic leaves
	for _, c := range policytest.Cases() {
		if c.Flow.Network != rules.TCP {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			fl := c.Flow
			opts := caseOptions(fl, netip.AddrPortFrom(fl.Dst, fl.Port), &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"),
				Names: map[netip.Addr]string{policytest.PoolAddr: policytest.PoolName}})
			pol := exitSettings(dec, p.Addr.Port())
			e := newEnv(t, pol, opts)
			e.wantDecided(c.Action, c.Rule)
			// Status counts the flow under what decided it, with that step's action.
			var row *RuleHits
			st := e.r.Status()
			for i := range st.Rules {
				if st.Rules[i].Rule.Name == c.Rule {
					row = &st.Rules[i]
				}
			}
			if row == nil || row.Hits != 1 || row.Rule.Action != c.Action {
				t.Errorf("status row for %q = %+v, want 1 hit with action %s", c.Rule, row, c.Action)
			}
			if st.Totals.Flows != 1 {
				t.Errorf("total flows = %d, want 1", st.Totals.Flows)
			}
			refused := e.r.Refusals()
			if c.Action == rules.Block && (len(refused) != 1 || refused[0].Count != 1 || refused[0].Recent[0].Rule != c.Rule) {
				t.Errorf("refusals = %+v, want one for %q", refused, c.Rule)
			}
		})
	}
}

// flowEndRecord is a flow's end record: its rule (quoted when it has spaces) and action.
var flowEndRecord = regexp.MustCompile(`msg=flow .*rule=("[^"]*"|\S+) action=(\S+)`)

// wantDecided connects "through capture" (the case's Original says where from and to) and
// checks that the relay's record of the flow names the action and rule the case wants.
func (e *env) wantDecided(action rules.Action, rule string) {
	e.t.Helper()
	e.dialCapture(nil)
	e.wantRecorded("relay", action, rule)
}

// dialCapture connects "through capture" (the env's Original says where from and to) and
// writes first, unless empty. A refusal before the dial returned is no error; the
// connection closes when the test ends.
func (e *env) dialCapture(first []byte) {
	e.t.Helper()
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
	switch {
	case errors.Is(err, syscall.ECONNRESET): // refused before the dial returned
	case err != nil:
		e.t.Fatal(err)
	default:
		e.t.Cleanup(func() { c.Close() })
		if len(first) > 0 {
			c.Write(first)
		}
	}
}

// wantRecorded waits for the flow's end record and checks that it names action and rule;
// path names the way the flow came in, for the error ("relay", "inbound").
func (e *env) wantRecorded(path string, action rules.Action, rule string) {
	e.t.Helper()
	e.waitLog("msg=flow ")
	m := flowEndRecord.FindStringSubmatch(e.logs.String())
	if m == nil {
		e.t.Fatalf("no flow record in\n%s", e.logs.String())
	}
	if got := unquote(m[1]); got != rule || m[2] != action.String() {
		e.t.Errorf("%s decided %s by %q, want %s by %q", path, m[2], got, action, rule)
	}
}

// unquote is a log value without its quotes, when it has them.
func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}
