// Package replay judges a recorded session (the flow log, [log] flows) under two configs
// with the policy that the data path and `router explain` decide with, and reports which
// recorded flows the new config would refuse, newly let through, or send another way,
// grouped by the rule that would decide them. It is `router diff`: a policy change is
// replayed before it applies.
//
// A record becomes the flow the capture saw: its network, source, destination address and
// port, the name and where it came from (a fake IP's name is the destination's name, a
// sniffed TLS or HTTP name stays a sniffed name), the owning process's name, and for a caged
// flow without an owner (a VM network's, an inbound's) that it entered from a VM-facing
// side. What the record cannot tell (the process's path and services, the addresses a name
// resolved to) is left unknown, as explain leaves it; so the replay is exact for rules on
// names, addresses, ports, apps and sources, which are what a flow log records.
//
// A change opens the cage when a flow the old config refused would be carried, or when a
// caged flow the old config sent through a proxy would go direct (it would leave from the
// host's own address): `router diff` exits 1 then, so a user's CI can hold a policy change.
package replay

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// Change is how a recorded flow's outcome moves from the old config to the new.
type Change int

const (
	Same    Change = iota // the same action and proxy
	Opened                // refused before, carried now; or caged and proxied before, direct now
	Refused               // carried before, refused now
	Moved                 // carried both times, another way (another proxy, or direct to proxy)
)

func (c Change) String() string {
	switch c {
	case Opened:
		return "opened"
	case Refused:
		return "refused"
	case Moved:
		return "moved"
	}
	return "same"
}

// FlowOf is the flow a record stands for, and false for a record that is not a flow (a
// dropped-records line).
func FlowOf(rec auditlog.Record) (policy.Flow, bool) {
	if rec.Event != auditlog.EventFlow && rec.Event != auditlog.EventRefused {
		return policy.Flow{}, false
	}
	f := policy.Flow{Owner: rules.Owner{App: rec.App}}
	n, ok := rules.ParseNetwork(cmp.Or(rec.Network, "tcp"))
	if !ok {
		return policy.Flow{}, false
	}
	f.Network = n
	if rec.Src.IsValid() {
		f.Src = rec.Src.Addr().Unmap()
	}
	f.Port = rec.DstPort
	if rec.Dst.IsValid() {
		f.Dst, f.Port = rec.Dst.Addr().Unmap(), rec.Dst.Port()
	}
	switch rec.NameFrom {
	case "sni", "host":
		f.Sniffed = rec.Name
	default:
		f.Host = rec.Name
	}
	// A caged flow with no owner came from a VM network or interface, or through an
	// inbound: it is caged whatever the new config's networks say, as the capture would
	// still hand it over so. A process's flow is caged by what the new config names.
	f.FromVM = rec.Caged && rec.App == ""
	return f, true
}

// Dest is one destination of a group and how many of its flows moved.
type Dest struct {
	Name  string `json:"dst"`
	Flows int    `json:"flows"`
}

// Group is the recorded flows that change the same way, from the same old outcome to the
// same new one.
type Group struct {
	Change Change  `json:"-"`
	Kind   string  `json:"change"`
	Old    Outcome `json:"old"`
	New    Outcome `json:"new"`
	Flows  int     `json:"flows"`
	Dests  []Dest  `json:"destinations"`
}

// Outcome is one config's decision of a flow, as the report prints it.
type Outcome struct {
	Action string `json:"action"`
	Proxy  string `json:"proxy,omitempty"`
	Rule   string `json:"rule"` // `#N "name"`, or the implicit step's name
}

func (o Outcome) String() string {
	s := o.Action
	if o.Proxy != "" {
		s += " via " + o.Proxy
	}
	return s + " by " + o.Rule
}

// Report is the replay's result.
type Report struct {
	Flows   int     `json:"flows"`   // records replayed
	Skipped int     `json:"skipped"` // records that are not flows
	Same    int     `json:"same"`    // flows whose outcome does not change
	Groups  []Group `json:"groups"`  // the changes: opened first, then refused, then moved
}

// Opens reports whether the new config opens anything the old one refused (see the package
// documentation).
func (r *Report) Opens() bool {
	return slices.ContainsFunc(r.Groups, func(g Group) bool { return g.Change == Opened })
}

// Differ replays records under two policies. Add records, then call Report.
type Differ struct {
	old, new *policy.Policy
	report   Report
	groups   map[groupKey]*groupAcc
}

type groupKey struct {
	change   Change
	old, new Outcome
}

type groupAcc struct {
	flows int
	dests map[string]int
}

// New returns a Differ judging under old and new.
func New(old, new *policy.Policy) *Differ {
	return &Differ{old: old, new: new, groups: map[groupKey]*groupAcc{}}
}

// Add replays one record.
func (d *Differ) Add(rec auditlog.Record) {
	f, ok := FlowOf(rec)
	if !ok {
		d.report.Skipped++
		return
	}
	d.report.Flows++
	od, nd := d.old.Decide(&f), d.new.Decide(&f)
	ch := classify(od, nd)
	if ch == Same {
		d.report.Same++
		return
	}
	k := groupKey{ch, outcome(od), outcome(nd)}
	g := d.groups[k]
	if g == nil {
		g = &groupAcc{dests: map[string]int{}}
		d.groups[k] = g
	}
	g.flows++
	g.dests[destOf(rec)]++
}

// Report returns what was replayed so far, the groups ordered by change (opened, refused,
// moved), then by flows (most first), then by the new outcome's text.
func (d *Differ) Report() Report {
	r := d.report
	r.Groups = nil
	for k, g := range d.groups {
		grp := Group{Change: k.change, Kind: k.change.String(), Old: k.old, New: k.new, Flows: g.flows}
		for name, n := range g.dests {
			grp.Dests = append(grp.Dests, Dest{Name: name, Flows: n})
		}
		slices.SortFunc(grp.Dests, func(a, b Dest) int { return cmp.Or(b.Flows-a.Flows, cmp.Compare(a.Name, b.Name)) })
		r.Groups = append(r.Groups, grp)
	}
	slices.SortFunc(r.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Change, b.Change), b.Flows-a.Flows,
			cmp.Compare(a.New.String(), b.New.String()), cmp.Compare(a.Old.String(), b.Old.String()))
	})
	return r
}

// classify says how a flow's outcome moves from od to nd.
func classify(od, nd policy.Decision) Change {
	oldBlock, newBlock := od.Action == rules.Block, nd.Action == rules.Block
	switch {
	case oldBlock && newBlock:
		return Same
	case oldBlock:
		return Opened
	case newBlock:
		return Refused
	case od.Action == nd.Action && od.Proxy == nd.Proxy:
		return Same
	case nd.Caged && od.Action == rules.Proxy && nd.Action == rules.Direct:
		return Opened // a caged flow would leave from the host's own address
	}
	return Moved
}

func outcome(d policy.Decision) Outcome {
	o := Outcome{Action: d.Action.String(), Proxy: d.Proxy, Rule: d.Name}
	if d.Index >= 0 {
		o.Rule = "#" + strconv.Itoa(d.Index+1) + " " + strconv.Quote(d.Name)
	}
	return o
}

// destOf names a record's destination as the report lists it: name:port when the name is
// known, else address:port.
func destOf(rec auditlog.Record) string {
	port := rec.DstPort
	if rec.Dst.IsValid() {
		port = rec.Dst.Port()
	}
	if rec.Name != "" {
		return rec.Name + ":" + strconv.Itoa(int(port))
	}
	if rec.Dst.IsValid() {
		return rec.Dst.String()
	}
	return fmt.Sprintf("?:%d", port)
}
