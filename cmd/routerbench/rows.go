//go:build linux

package main

import (
	"fmt"
	"slices"

	"github.com/agentcage/router/internal/lab"
)

// row is one way of reaching the sink from the guest.
type row struct {
	name  string
	src   string // guest source address
	socks string // the client speaks SOCKS5 to this server itself
	// proxy is the row's transparent proxy (nil: none, the hypervisor's NAT alone).
	proxy func(*world) *lab.Process
	// maxIdle is the most idle flows the proxy can hold under the 20,000-fd cap; 0: no limit.
	maxIdle int
}

// The row names. "router" is the build under test; "router-base" the second build it is
// paired with (-base, -base-rev).
const (
	rowDirect     = "direct"
	rowUpstream   = "upstream"
	rowRedsocks   = "redsocks"
	rowSingbox    = "singbox"
	rowRouterBase = "router-base"
	rowRouter     = "router"
)

// allRows lists the rows o makes available, in the order of a round: the references first,
// the peers, then the two router builds side by side.
func allRows(o options) []row {
	proc := func(name string) func(*world) *lab.Process {
		return func(w *world) *lab.Process { return w.procs[name] }
	}
	rs := []row{
		{name: rowDirect, src: srcNAT},
		{name: rowUpstream, src: srcNAT, socks: upstream},
		// redsocks and sing-box splice through two pipes they hold for every flow, idle or
		// not: 6 descriptors a flow, so 2,500 flows at most under the 20,000-fd cap.
		{name: rowRedsocks, src: srcRedsocks, proxy: proc(rowRedsocks), maxIdle: 2500},
	}
	if o.singbox {
		rs = append(rs, row{name: rowSingbox, src: srcSingbox, proxy: proc(rowSingbox), maxIdle: 2500})
	}
	if o.hasBase() {
		rs = append(rs, row{name: rowRouterBase, src: routerSpecOf(rowRouterBase).src, proxy: proc(rowRouterBase)})
	}
	return append(rs, row{name: rowRouter, src: routerSpecOf(rowRouter).src, proxy: proc(rowRouter)})
}

// selectRows is allRows narrowed to -rows, or an error naming a row that is not available.
func selectRows(o options) ([]row, error) {
	all := allRows(o)
	for _, name := range o.rows {
		if !slices.ContainsFunc(all, func(r row) bool { return r.name == name }) {
			var have []string
			for _, r := range all {
				have = append(have, r.name)
			}
			return nil, fmt.Errorf("-rows: no row %q here (available: %v; router-base needs -base or -base-rev, singbox -singbox)", name, have)
		}
	}
	return slices.DeleteFunc(all, func(r row) bool { return !o.want(r.name) }), nil
}

// roundOrder is the order of the rows in round i: as listed in even rounds, reversed in odd
// ones, so that no row always runs right after the same other one (a heavy row leaves
// TIME_WAIT sockets, dirty caches and a busy kernel behind for whichever comes next).
func roundOrder(rs []row, i int) []row {
	if i%2 == 0 {
		return rs
	}
	r := slices.Clone(rs)
	slices.Reverse(r)
	return r
}

func rowNames(rs []row) []string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.name
	}
	return names
}
