package nftcap

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/nftables"

	"github.com/agentcage/router/router/nftcap/cagemark"
)

// layout is the shape of a table: its chains with the number of rules of each, and its
// named sets with the number of elements of each. Two tables built from one Spec have the
// same layout; a table whose chain, rule, set or element was removed or added has another.
type layout struct {
	chains map[string]int
	sets   map[string]int
}

// expectedLayout is what Install(spec) puts in the kernel, computed by queueing the batch on
// a connection that is never flushed (no netlink socket is opened).
func expectedLayout(spec Spec) (layout, error) {
	b := &builder{c: &nftables.Conn{}, rules: map[string]int{}, elems: map[string]int{}}
	if err := b.replace(spec); err != nil {
		return layout{}, err
	}
	return layout{chains: b.rules, sets: b.elems}, nil
}

// Check compares the table in the kernel with what Install(spec) installs and describes in
// words what differs: a missing table, a missing or foreign chain, a chain with more or
// fewer rules, a named set with more or fewer elements. It returns "" when the table is
// whole. err is set only when the kernel could not be asked; damage is then "". Check reads
// the table in several netlink requests: a change made meanwhile may show as damage, and a
// caller that repairs what Check reports (Install) does no harm by repairing a whole table.
func Check(spec Spec, opts ...Option) (damage string, err error) {
	if err := spec.Validate(); err != nil {
		return "", fmt.Errorf("nftcap check: invalid spec: %w", err)
	}
	want, err := expectedLayout(spec)
	if err != nil {
		return "", fmt.Errorf("nftcap check: %w", err)
	}
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(collect(opts).netNS), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		return "", fmt.Errorf("nftcap check: open netlink: %w", err)
	}
	defer c.CloseLasting()
	got, found, err := readLayout(c, spec.table())
	if err != nil {
		return "", fmt.Errorf("nftcap check table inet %s: %w", spec.table(), err)
	}
	if !found {
		return fmt.Sprintf("table inet %s is missing", spec.table()), nil
	}
	if d := want.diff(got); d != "" || !spec.caged() {
		return d, nil
	}
	if _, _, ok, err := cagemark.Installed(collect(opts).netNS); err != nil {
		return "", fmt.Errorf("nftcap check: %w", err)
	} else if !ok {
		return "the mark of the caged processes' sockets is not installed", nil
	}
	return "", nil
}

// readLayout reads the layout of the inet table named table; found is false when there is no
// such table.
func readLayout(c *nftables.Conn, table string) (l layout, found bool, err error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return l, false, fmt.Errorf("list tables: %w", err)
	}
	i := slices.IndexFunc(tables, func(t *nftables.Table) bool { return t.Name == table })
	if i < 0 {
		return l, false, nil
	}
	t := tables[i]
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return l, true, fmt.Errorf("list chains: %w", err)
	}
	l = layout{chains: map[string]int{}, sets: map[string]int{}}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != table {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return l, true, fmt.Errorf("list rules of chain %s: %w", ch.Name, err)
		}
		l.chains[ch.Name] = len(rules)
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return l, true, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		if s.Anonymous || strings.HasPrefix(s.Name, "__set") {
			continue // constant sets of single rules: part of their rule
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return l, true, fmt.Errorf("list elements of set %s: %w", s.Name, err)
		}
		l.sets[s.Name] = len(elems)
	}
	return l, true, nil
}

// diff describes how got differs from l ("" when it does not).
func (l layout) diff(got layout) string {
	out := diffCounts("chain", "rules", l.chains, got.chains)
	out = append(out, diffCounts("set", "elements", l.sets, got.sets)...)
	return strings.Join(out, "; ")
}

// diffCounts names what of kind is missing from got, has another count of what (rules,
// elements) than in want, or is in got only, in name order.
func diffCounts(kind, what string, want, got map[string]int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		n, ok := got[name]
		switch {
		case !ok:
			out = append(out, kind+" "+name+" is missing")
		case n != want[name]:
			out = append(out, fmt.Sprintf("%s %s has %d %s, want %d", kind, name, n, what, want[name]))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			out = append(out, kind+" "+name+" is not the router's")
		}
	}
	return out
}
