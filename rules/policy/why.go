package policy

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentcage/router/rules"
)

// WhyText says, in lines of plain text, how a TCP flow of src (its source as a capture knows
// it: Src, FromVM, Owner; its destination fields are ignored) to host (a name, or
// an address in text) on port would be decided (Explain) and why: the flow, each rule up to
// the deciding one with the field that did not match, the verdict, and for a refusal
// RefusalText's words. It names rules, never their values (hosts, sources, apps) nor any
// other part of the config, so it may answer a guest: the router's answer to a guest's
// `router check-ip --why`. A name is decided as a fake IP's (its name alone, before any
// first bytes).
func (p *Policy) WhyText(src *Flow, host string, port uint16) []string {
	f := Flow{Src: src.Src, Owner: src.Owner, FromVM: src.FromVM, Network: rules.TCP, Port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		f.Dst = a.Unmap()
	} else {
		f.Host = host
	}
	d, steps := p.Explain(&f)
	caged := "not caged"
	if d.Caged {
		caged = "caged"
	}
	from := "an unknown source"
	if f.Src.IsValid() {
		from = f.Src.String()
	}
	lines := []string{"tcp " + whyDst(host, port) + " from " + from + " (" + caged + ")"}
	for _, s := range steps {
		ref := "rule #" + strconv.Itoa(s.Index+1) + " " + strconv.Quote(s.Name)
		if s.Match {
			lines = append(lines, ref+": matches")
		} else {
			lines = append(lines, ref+": no ("+s.Field+")")
		}
	}
	by := d.Step.String()
	if d.Step == StepRule {
		by = "rule #" + strconv.Itoa(d.Index+1) + " " + strconv.Quote(d.Name)
	}
	verdict := "verdict: " + d.Action.String()
	if d.Action == rules.Proxy && d.Proxy != "" {
		verdict += " via " + d.Proxy
	}
	lines = append(lines, verdict+" by "+by)
	if d.Action == rules.Block {
		lines = append(lines, RefusalText(d))
	}
	return lines
}

// whyDst writes host and port as HOST:PORT, an IPv6 address in brackets.
func whyDst(host string, port uint16) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(port))
}
