package main

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/agentcage/router/router/control"
)

// This file draws `router watch`'s screen (View) from the model of watchmodel.go, laid out
// by watchlayout.go. State, Update and View are plain values and functions over
// control.Status, so tests drive the screen with messages and read the frame without a
// terminal. The only side effect is the status source, called from the command that Update
// returns (bubbletea runs it on a goroutine of its own).

// watchStyles colour the screen. Their renderer decides how much colour the terminal gets
// (none when the output is not a terminal or NO_COLOR is set).
type watchStyles struct {
	plain, head, dim, bad, good, warn, paused lipgloss.Style
	direct, proxy, block                      lipgloss.Style
}

// newWatchStyles makes the styles for r. The colours are the 16 ANSI ones, so the
// terminal's theme decides the exact shades and a 16-colour Windows console shows them.
func newWatchStyles(r *lipgloss.Renderer) watchStyles {
	s := r.NewStyle()
	return watchStyles{
		plain:  s,
		head:   s.Bold(true),
		dim:    s.Faint(true),
		bad:    s.Foreground(lipgloss.Color("1")),
		good:   s.Foreground(lipgloss.Color("2")),
		warn:   s.Foreground(lipgloss.Color("3")),
		paused: s.Reverse(true).Bold(true),
		direct: s.Foreground(lipgloss.Color("6")),
		proxy:  s.Foreground(lipgloss.Color("5")),
		block:  s.Foreground(lipgloss.Color("1")).Bold(true),
	}
}

// action is the style of a rule's action: direct, proxy and block each their own colour.
func (s watchStyles) action(a string) lipgloss.Style {
	switch a {
	case "direct":
		return s.direct
	case "proxy":
		return s.proxy
	case "block":
		return s.block
	}
	return s.plain
}

// state is the style of an upstream's state: up green, down red, unknown yellow.
func (s watchStyles) state(st string) lipgloss.Style {
	switch st {
	case "up":
		return s.good
	case "down":
		return s.bad
	}
	return s.warn
}

// View draws the frame: never wider than the width nor taller than the height (when known).
func (m watchModel) View() string {
	var top, bottom []string
	top = append(top, m.headerLines()...)
	if line := m.connectionLine(); line != "" {
		top = append(top, line)
	}
	bottom = append(bottom, m.footerLines()...)

	var secs []section
	if m.shown != nil {
		secs = m.sections()
	}
	avail := -1 // no limit
	if m.height > 0 {
		avail = max(m.height-len(top)-len(bottom), 0)
	}
	lines := slices.Clone(top)
	for _, s := range fitSections(secs, avail) {
		lines = append(lines, s...)
	}
	if m.height > 0 { // the keys on the last line
		for len(lines)+len(bottom) < m.height {
			lines = append(lines, "")
		}
	}
	lines = append(lines, bottom...)
	if m.height > 0 && len(lines) > m.height { // the top and the bottom alone are too tall
		keep := max(m.height-len(bottom), 0)
		lines = append(lines[:keep:keep], bottom...)[:m.height]
	}
	if m.width > 0 {
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, m.width, "…")
		}
	}
	return strings.Join(lines, "\n")
}

// headerLines are the uptime, the config, the DNS mode and the totals.
func (m watchModel) headerLines() []string {
	st, sty := m.shown, m.styles
	var b strings.Builder
	if m.paused {
		b.WriteString(sty.paused.Render(" PAUSED ") + " ")
	}
	b.WriteString(sty.head.Render("router watch"))
	if st == nil {
		b.WriteString("  waiting for the router at " + m.where)
		return []string{b.String()}
	}
	fmt.Fprintf(&b, "  running %s  config %s  dns %s", m.shownAt.Sub(st.Started).Round(time.Second), st.Config, st.DNS.Mode)
	if st.DNS.Pool != "" {
		fmt.Fprintf(&b, " (%d names, %d in use)", st.DNS.Mapped, st.DNS.InUse)
	}
	if m.paused {
		fmt.Fprintf(&b, "  frozen at %s", clockText(m.shownAt))
	}
	t := st.Totals
	refused := fmt.Sprintf("refused %d", t.Refused)
	if t.Refused > 0 {
		refused = sty.warn.Render(refused)
	}
	line2 := fmt.Sprintf("flows %d  live %d  up %s  down %s  %s", t.Flows, t.Live, humanBytes(t.Up), humanBytes(t.Down), refused)
	return []string{b.String(), line2}
}

// connectionLine says when the router cannot be reached, or that it came back; "" otherwise.
func (m watchModel) connectionLine() string {
	if m.err != nil {
		return m.styles.bad.Render(fmt.Sprintf("cannot reach the router since %s, retrying every %s: %v", clockText(m.failingSince), m.interval, m.err))
	}
	if m.notice != "" && m.latestAt.Before(m.noticeUntil) {
		return m.styles.warn.Render(m.notice)
	}
	return ""
}

// footerLines are the filter being typed, or the keys.
func (m watchModel) footerLines() []string {
	sty := m.styles
	if m.editing {
		return []string{sty.head.Render("filter: ") + m.filter + "_  " + sty.dim.Render("(Enter keeps it, Esc clears it)")}
	}
	pause := "pause"
	if m.paused {
		pause = "resume"
	}
	keys := fmt.Sprintf("q quit  p %s  s sort: %s  / filter  ? help", pause, m.sort)
	if m.filter != "" {
		keys += "  Esc clears the filter"
	}
	lines := []string{sty.dim.Render(keys)}
	if m.help {
		lines = append([]string{
			"q, ctrl-c: quit.  p: pause (the view freezes; polling goes on) and resume.",
			"s: sort the flows by rate (fastest first), age (newest first) or bytes (most first).",
			"/: filter the flows by text in their rule, action, upstream, app, source, destination or",
			"host; it applies as you type, Enter keeps it, Esc clears it.  ?: hide this help.",
			"o, r, A, d: answer the oldest ask prompt once, for this run, always, or deny.",
		}, lines...)
	}
	return lines
}

// sections are the upstreams, the live flows, the refusals and the rules, in screen order.
func (m watchModel) sections() []section {
	st, sty, now := m.shown, m.styles, m.shownAt
	more := func(what string) func(int) string {
		return func(n int) string { return sty.dim.Render(fmt.Sprintf("… %d more %s", n, what)) }
	}
	var secs []section

	if len(st.Asks) > 0 {
		asks := drawable(m, st.Asks)
		rows := make([][]string, len(asks))
		for i, p := range asks {
			rows[i] = []string{fmt.Sprint(p.ID), net.JoinHostPort(p.Host, fmt.Sprint(p.Port)), fmt.Sprint(p.Held), strings.Join(p.Sources, ","), p.Rule, p.Until.Sub(now).Round(time.Second).String()}
		}
		lines := m.table([]column{{title: "ASKING", right: true}, {title: "DESTINATION", flex: true, min: 22}, {title: "HELD", right: true},
			{title: "SOURCES", flex: true}, {title: "RULE", flex: true}, {title: "LEFT", right: true}}, rows, func(int, int) lipgloss.Style { return sty.plain })
		hint := sty.dim.Render("the oldest: o once  r this run  A always  d deny  (or router ask, or the console)")
		secs = append(secs, section{head: []string{"", lines[0]}, rows: append(lines[1:], hint), extra: len(st.Asks) - len(asks), min: 2, more: more("prompts")})
	}

	if len(st.Upstreams) > 0 {
		ups := drawable(m, st.Upstreams)
		rows := make([][]string, len(ups))
		for i, u := range ups {
			rows[i] = []string{u.Name, u.State, ago(u.Since, now), latency(u.Latency), u.LastError}
		}
		lines := m.table([]column{{title: "UPSTREAM", flex: true}, {title: "STATE"}, {title: "SINCE", right: true}, {title: "LATENCY", right: true}, {title: "LAST ERROR", flex: true}},
			rows, func(row, col int) lipgloss.Style {
				if col == 1 {
					return sty.state(ups[row].State)
				}
				return sty.plain
			})
		secs = append(secs, section{head: []string{"", lines[0]}, rows: lines[1:], extra: len(st.Upstreams) - len(ups), min: 2, more: more("upstreams")})
	}

	flows := m.visibleFlows()
	title := fmt.Sprintf("LIVE FLOWS %d", len(st.Flows))
	if m.filter != "" {
		title = fmt.Sprintf("LIVE FLOWS %d of %d match %q", len(flows), len(st.Flows), m.filter)
	}
	title = sty.head.Render(title) + sty.dim.Render(", by "+m.sort.String())
	cols := []column{{title: "ID", right: true, spare: true}, {title: "SOURCE", flex: true, min: 15}, {title: "DESTINATION", flex: true, min: 22},
		{title: "RULE", flex: true, min: 10}, {title: "ACTION", flex: true, min: 10, drop: 2}, {title: "AGE", right: true, drop: 4},
		{title: "UP", right: true, drop: 3}, {title: "DOWN", right: true, drop: 3}, {title: "UP/s", right: true, drop: 1}, {title: "DOWN/s", right: true, drop: 1}}
	switch m.sort { // the columns the flows are sorted by stay
	case sortAge:
		cols[5].drop = 0
	case sortBytes:
		cols[6].drop, cols[7].drop = 0, 0
	case sortRate:
		cols[8].drop, cols[9].drop = 0, 0
	}
	drawn := drawable(m, flows)
	flowRows := func(compact bool) [][]string {
		rows := make([][]string, len(drawn))
		for i, f := range drawn {
			src, dst := flowSource(f), flowDest(f)
			if compact {
				src, dst = compactSource(f), compactDest(f)
			}
			rows[i] = []string{fmt.Sprint(f.ID), src, dst, f.Rule, actionText(f.Action, cmp.Or(f.Via, f.Proxy)),
				f.Age.Round(time.Second).String(), humanBytes(f.Up), humanBytes(f.Down), humanRate(f.UpRate), humanRate(f.DownRate)}
		}
		return rows
	}
	rows := flowRows(false)
	if m.width > 0 && tableWidth(fitColumns(cols, rows, 0)) > m.width {
		rows = flowRows(true)
	}
	lines := m.table(cols, rows, func(row, col int) lipgloss.Style {
		if col == 3 || col == 4 {
			return sty.action(drawn[row].Action)
		}
		return sty.plain
	})
	fs := section{head: []string{"", title, lines[0]}, rows: lines[1:], extra: len(flows) - len(drawn), min: 3, more: more("flows")}
	if len(flows) == 0 {
		empty := "no live flows"
		if m.filter != "" {
			empty = "no live flow matches"
		}
		fs.rows = []string{sty.dim.Render(empty)}
	}
	secs = append(secs, fs)

	if len(st.Refusals) > 0 {
		refs := drawable(m, st.Refusals)
		rows := make([][]string, len(refs))
		for i, r := range refs {
			latest := ""
			if len(r.Recent) > 0 {
				latest = refusedText(r.Recent[0]) + ", " + ago(r.Recent[0].At, now) + " ago"
			}
			rows[i] = []string{r.Reason, fmt.Sprint(r.Count), latest}
		}
		lines := m.table([]column{{title: "REFUSED", flex: true}, {title: "COUNT", right: true}, {title: "LATEST", flex: true}}, rows, nil)
		secs = append(secs, section{head: []string{"", lines[0]}, rows: lines[1:], extra: len(st.Refusals) - len(refs), min: 2, more: more("reasons")})
	}

	if len(st.DomainBudgets) > 0 {
		bs := drawable(m, st.DomainBudgets)
		rows := make([][]string, len(bs))
		for i, u := range bs {
			rows[i] = budgetRow(u, now)
		}
		lines := m.table([]column{{title: "BUDGET"}, {title: "GUEST", flex: true}, {title: "DOMAIN", flex: true}, {title: "USED", right: true}, {title: "WINDOW ENDS"}}, rows, nil)
		secs = append(secs, section{head: []string{"", lines[0]}, rows: lines[1:], extra: len(st.DomainBudgets) - len(bs), min: 2, more: more("budgets")})
	}

	if len(st.Rules) > 0 {
		rules := drawable(m, st.Rules)
		rows := make([][]string, len(rules))
		for i, r := range rules {
			rows[i] = []string{statusRule(r.Index, r.Name), ruleAction(r), fmt.Sprint(r.Hits), humanBytes(r.Bytes)}
		}
		lines := m.table([]column{{title: "RULE", flex: true}, {title: "ACTION", flex: true}, {title: "FLOWS", right: true}, {title: "BYTES", right: true}},
			rows, func(row, col int) lipgloss.Style {
				if col <= 1 {
					return sty.action(rules[row].Action)
				}
				return sty.plain
			})
		secs = append(secs, section{head: []string{"", lines[0]}, rows: lines[1:], extra: len(st.Rules) - len(rules), min: 2, more: more("rules")})
	}
	return secs
}

// compactSource is the flow's app when it has one, else its source address: what tells flows
// apart on a narrow screen.
func compactSource(f control.FlowStat) string {
	return cmp.Or(f.App, f.Src)
}

// compactDest is host:port when the flow's destination has a name, else the address.
func compactDest(f control.FlowStat) string {
	ap, err := netip.ParseAddrPort(f.Dst)
	if f.Host == "" || err != nil {
		return f.Dst
	}
	if f.NameFrom == "sni" || f.NameFrom == "host" {
		// A name the flow's own bytes gave: said, as an address no DNS answer of ours named.
		return net.JoinHostPort(f.Host, strconv.Itoa(int(ap.Port()))) + " (" + f.NameFrom + ")"
	}
	return net.JoinHostPort(f.Host, strconv.Itoa(int(ap.Port())))
}
