package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// Step is one rule's part in a decision: it matched, or the named field did not.
type Step struct {
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Match  bool   `json:"match"`
	Field  string `json:"field,omitempty"`  // the first field that did not match
	Reason string `json:"reason,omitempty"` // why, in words
}

// Explain decides like Linear and also says, for every rule up to the winner, whether it
// matched and, if not, which field failed and why.
func Explain(rs []Rule, q *Query) (Verdict, []Step) {
	f := newFlow(q)
	steps := make([]Step, 0, len(rs))
	for i := range rs {
		r := &rs[i]
		field := r.mismatch(&f)
		if field == "" {
			steps = append(steps, Step{Index: i, Name: r.Name, Match: true})
			return verdictOf(rs, i), steps
		}
		steps = append(steps, Step{Index: i, Name: r.Name, Field: field, Reason: r.why(field, &f)})
	}
	return verdictOf(rs, -1), steps
}

// why says in words why field did not match.
func (r *Rule) why(field string, f *flow) string {
	switch field {
	case FieldEnabled:
		return "the rule is disabled (enabled = false): it matches nothing"
	case FieldNetwork:
		if f.network == AnyNetwork {
			return "the flow's network is unknown; the rule wants " + r.Network.String()
		}
		return fmt.Sprintf("%s is not %s", f.network, r.Network)
	case FieldSources:
		if !f.src.IsValid() {
			return "the flow's source is unknown; the rule wants " + list(r.Sources)
		}
		return fmt.Sprintf("source %s is not in %s", f.src, list(r.Sources))
	case FieldHosts:
		var what string
		switch {
		case f.dst.IsValid() && f.host != "":
			what = f.dst.String() + " / " + strconv.Quote(lower(f.host))
		case f.host != "":
			what = strconv.Quote(lower(f.host))
		case f.dst.IsValid():
			what = f.dst.String() + " (no name known)"
		default:
			what = "unknown"
		}
		return fmt.Sprintf("destination %s is not in %s", what, list(r.Hosts))
	case FieldPorts:
		return fmt.Sprintf("port %d is not in %s", f.port, list(r.Ports))
	case FieldApps:
		if f.app == "" && f.path == "" {
			return "the flow's process is unknown; the rule wants " + list(r.Apps)
		}
		who := strconv.Quote(lower(f.app))
		if f.path != "" {
			who += " (" + normalizePath(f.path) + ")"
		}
		return fmt.Sprintf("process %s is not %s", who, list(r.Apps))
	case FieldCaged:
		return "the flow is not caged (it comes from no VM network or VM-facing interface, and its process is no caged app)"
	case FieldServices:
		if len(f.services) == 0 {
			return "the process hosts no service; the rule wants " + strings.Join(r.Services, ", ")
		}
		return fmt.Sprintf("services %s are not %s", strings.Join(f.services, ", "), strings.Join(r.Services, ", "))
	}
	return field
}

func list[T fmt.Stringer](xs []T) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x.String())
	}
	return b.String()
}

// Why returns "", "" when r matches q; otherwise the first field of r that does not match
// (a Field constant) and why, in words.
func (r *Rule) Why(q *Query) (field, reason string) {
	f := newFlow(q)
	field = r.mismatch(&f)
	if field == "" {
		return "", ""
	}
	return field, r.why(field, &f)
}
