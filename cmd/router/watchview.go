package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/charmbracelet/x/ansi"

	"github.com/agentcage/router/router/control"
)

// This file is `router watch`'s screen: a bubbletea model whose state, Update and View are
// plain values and functions over control.Status, so tests drive it with messages and read
// the frame without a terminal. The only side effect is the status source, called from the
// command that Update returns (bubbletea runs it on a goroutine of its own).

// statusSource asks the running daemon for one snapshot. It is called from one goroutine at a
// time (the next poll is scheduled only after the previous answer arrived) and must return
// within a bounded time.
type statusSource func() (*control.Status, error)

// sortKey orders the live flows.
type sortKey int

const (
	sortRate  sortKey = iota // fastest first (up + down rate), the default
	sortAge                  // newest first
	sortBytes                // most bytes first (up + down)
	sortKeys
)

func (k sortKey) String() string {
	return [...]string{"rate", "age", "bytes"}[k]
}

// parseSortKey parses "rate", "age" or "bytes".
func parseSortKey(s string) (sortKey, bool) {
	for k := range sortKeys {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// statusMsg is the answer of one poll, taken at At.
type statusMsg struct {
	st  *control.Status
	err error
	at  time.Time
}

// tickMsg says it is time to poll again.
type tickMsg struct{}

// noticeFor is how long a notice (reconnected, restarted) stays on screen.
const noticeFor = 10 * time.Second

// watchModel is the state of the screen. It is a value: Update returns a changed copy.
type watchModel struct {
	src      statusSource
	clock    func() time.Time // the time a poll is taken at; time.Now outside tests
	interval time.Duration
	where    string // the control channel's path, for messages
	styles   watchStyles

	shown    *control.Status // on screen; frozen while paused; nil before the first answer
	shownAt  time.Time       // when shown was taken: ages and the uptime count from it
	latest   *control.Status // the newest answer (the same as shown unless paused)
	latestAt time.Time

	err          error     // the last poll's error; nil when it answered
	failingSince time.Time // the first failed poll of the current run of failures
	notice       string    // a passing message (reconnected, restarted)
	noticeUntil  time.Time // notice is shown while the latest poll is before this

	sort    sortKey
	filter  string // flows whose text contains it (case-insensitive); "" shows all
	editing bool   // the filter is being typed (it applies as it is typed)
	paused  bool
	help    bool

	width, height int // of the terminal; 0 means no limit (a frame printed to a file)
}

// newWatchModel makes the screen's initial state; src is polled every interval.
func newWatchModel(src statusSource, interval time.Duration, where string, styles watchStyles) watchModel {
	return watchModel{src: src, clock: time.Now, interval: interval, where: where, styles: styles}
}

var _ tea.Model = watchModel{}

// Init polls at once.
func (m watchModel) Init() tea.Cmd { return m.poll() }

// poll is the command that asks the source and reports its answer as a statusMsg.
func (m watchModel) poll() tea.Cmd {
	src, clock := m.src, m.clock
	return func() tea.Msg {
		at := clock()
		st, err := src()
		return statusMsg{st: st, err: err, at: at}
	}
}

// tick waits one interval and asks for the next poll.
func (m watchModel) tick() tea.Cmd {
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
}

// Update applies one message.
func (m watchModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		return m, nil
	case tickMsg:
		return m, m.poll()
	case statusMsg:
		return m.withStatus(msg), m.tick()
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

// withStatus records one poll's answer.
func (m watchModel) withStatus(msg statusMsg) watchModel {
	if msg.err != nil || msg.st == nil {
		m.err = cmp.Or(msg.err, error(errNoStatus))
		if m.failingSince.IsZero() {
			m.failingSince = msg.at
		}
		m.latestAt = msg.at
		return m
	}
	switch {
	case m.latest != nil && !msg.st.Started.Equal(m.latest.Started):
		m.notice = fmt.Sprintf("the router restarted at %s: its counters start again", clockText(msg.st.Started))
		m.noticeUntil = msg.at.Add(noticeFor)
	case m.err != nil && m.latest != nil:
		m.notice = fmt.Sprintf("reconnected at %s (unreachable for %s)", clockText(msg.at), msg.at.Sub(m.failingSince).Round(time.Second))
		m.noticeUntil = msg.at.Add(noticeFor)
	}
	m.err, m.failingSince = nil, time.Time{}
	m.latest, m.latestAt = msg.st, msg.at
	if !m.paused || m.shown == nil {
		m.shown, m.shownAt = msg.st, msg.at
	}
	return m
}

// errNoStatus stands for an answer without a status, which a daemon never gives.
var errNoStatus = errors.New("the router answered without a status")

func clockText(t time.Time) string { return t.Format("15:04:05") }

// key applies one key press.
func (m watchModel) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.Type == tea.KeyCtrlC {
		return m, tea.Quit
	}
	if k.Alt && !k.Paste {
		// A terminal sends Alt+x as Esc and x, so Esc typed just before x reads as Alt+x.
		// No key here is bound with Alt: it is Esc, then x.
		next, _ := m.key(tea.KeyMsg{Type: tea.KeyEsc})
		k.Alt = false
		return next.(watchModel).key(k)
	}
	if k.Type == tea.KeyRunes && !k.Paste && len(k.Runes) > 1 {
		// Keys typed faster than they are read (or sent in one write, as tmux does) arrive
		// as one message: each is a key of its own.
		for _, r := range k.Runes {
			next, cmd := m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
			if m = next.(watchModel); cmd != nil {
				return m, cmd // quit: the rest does not matter
			}
		}
		return m, nil
	}
	if m.editing {
		switch k.Type {
		case tea.KeyEnter:
			m.editing = false
		case tea.KeyEsc:
			m.editing, m.filter = false, ""
		case tea.KeyBackspace:
			if r := []rune(m.filter); len(r) > 0 {
				m.filter = string(r[:len(r)-1])
			}
		case tea.KeyRunes, tea.KeySpace:
			if !k.Paste || !strings.ContainsAny(string(k.Runes), "\r\n") {
				m.filter += string(k.Runes)
			}
		}
		return m, nil
	}
	switch {
	case k.Type == tea.KeyEsc:
		m.filter = ""
		return m, nil
	case k.Type != tea.KeyRunes || k.Paste:
		return m, nil
	}
	switch string(k.Runes) {
	case "q":
		return m, tea.Quit
	case "p":
		m.paused = !m.paused
		if !m.paused && m.latest != nil {
			m.shown, m.shownAt = m.latest, m.latestAt
		}
	case "s":
		m.sort = (m.sort + 1) % sortKeys
	case "/": // a new filter; it applies as it is typed
		m.editing, m.filter = true, ""
	case "?":
		m.help = !m.help
	}
	return m, nil
}

// visibleFlows are the shown flows that pass the filter, in the chosen order.
func (m watchModel) visibleFlows() []control.FlowStat {
	if m.shown == nil {
		return nil
	}
	fs := make([]control.FlowStat, 0, len(m.shown.Flows))
	for _, f := range m.shown.Flows {
		if flowMatches(f, m.filter) {
			fs = append(fs, f)
		}
	}
	sortFlows(fs, m.sort)
	return fs
}

// flowMatches tells whether text (case-insensitive) is part of the flow's rule, action,
// upstream, app, source, destination or host name; every flow matches "".
func flowMatches(f control.FlowStat, text string) bool {
	if text == "" {
		return true
	}
	text = strings.ToLower(text)
	for _, s := range []string{f.Rule, f.Action, f.Proxy, f.Via, f.App, f.Src, f.Dst, f.Host} {
		if strings.Contains(strings.ToLower(s), text) {
			return true
		}
	}
	return false
}

// sortFlows orders fs by k; ties go by flow ID, oldest first, so rows do not jump around.
func sortFlows(fs []control.FlowStat, k sortKey) {
	slices.SortStableFunc(fs, func(a, b control.FlowStat) int {
		var c int
		switch k {
		case sortRate:
			c = cmp.Compare(b.UpRate+b.DownRate, a.UpRate+a.DownRate)
		case sortAge:
			c = cmp.Compare(a.Age, b.Age)
		case sortBytes:
			c = cmp.Compare(b.Up+b.Down, a.Up+a.Down)
		}
		return cmp.Or(c, cmp.Compare(a.ID, b.ID))
	})
}

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
		}, lines...)
	}
	return lines
}

// section is one block of the body: head lines always shown with it, rows as many as fit.
// more is the text of the last row when some do not fit, given how many are left out.
type section struct {
	head  []string
	rows  []string
	extra int // rows left out before drawing (more than the screen holds), counted in more
	min   int // rows it gets before any section gets more
	more  func(n int) string
}

// fitSections gives each section its head and rows within avail lines (<0: no limit): first
// every section its minimum (dropping sections from the last when even that does not fit),
// then the rest in order. A section short of rows ends with its "more" line.
func fitSections(secs []section, avail int) [][]string {
	if avail < 0 {
		out := make([][]string, len(secs))
		for i, s := range secs {
			out[i] = append(slices.Clone(s.head), s.rows...)
		}
		return out
	}
	need := func(s section) int { return len(s.head) + min(s.min, len(s.rows)) }
	for len(secs) > 0 {
		total := 0
		for _, s := range secs {
			total += need(s)
		}
		if total <= avail || len(secs) == 1 {
			break
		}
		secs = secs[:len(secs)-1]
	}
	give := make([]int, len(secs))
	left := avail
	for i, s := range secs {
		give[i] = min(s.min, len(s.rows))
		left -= len(s.head) + give[i]
	}
	for i, s := range secs {
		if left <= 0 {
			break
		}
		extra := min(len(s.rows)-give[i], left)
		give[i] += extra
		left -= extra
	}
	out := make([][]string, len(secs))
	for i, s := range secs {
		lines := slices.Clone(s.head)
		n := give[i]
		if n < len(s.rows)+s.extra && n > 0 && s.more != nil {
			lines = append(lines, s.rows[:n-1]...)
			lines = append(lines, s.more(len(s.rows)+s.extra-(n-1)))
		} else {
			lines = append(lines, s.rows[:max(n, 0)]...)
		}
		out[i] = lines
	}
	return out
}

// sections are the upstreams, the live flows, the refusals and the rules, in screen order.
func (m watchModel) sections() []section {
	st, sty, now := m.shown, m.styles, m.shownAt
	more := func(what string) func(int) string {
		return func(n int) string { return sty.dim.Render(fmt.Sprintf("… %d more %s", n, what)) }
	}
	var secs []section

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

// drawable is the start of rows that a screen can show: at most its height (all when the
// height is unknown). The rest are only counted: drawing costs about 0.1 ms a row, and a
// config may have thousands of rules, a busy host thousands of flows.
func drawable[T any](m watchModel, rows []T) []T {
	if m.height > 0 && len(rows) > m.height {
		return rows[:m.height]
	}
	return rows
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
	return net.JoinHostPort(f.Host, strconv.Itoa(int(ap.Port())))
}

// column is one column of a table on screen.
type column struct {
	title string
	flex  bool // cut (ending in "…") when the table is wider than the screen
	min   int  // the narrowest a flex column is cut to (defaultMin when 0; never below its title)
	right bool // aligned right (numbers)
	drop  int  // when even cut columns do not fit, those of the highest drop go first; 0 stays
	spare bool // dropped as soon as anything would be cut
}

// colGap is the space between two columns.
const colGap = 2

// defaultMin is the narrowest a flex column without its own min is cut to.
const defaultMin = 8

// tableWidth is the width of a table whose columns have widths (0: dropped).
func tableWidth(widths []int) int {
	sum, n := 0, 0
	for _, w := range widths {
		if w > 0 {
			sum += w
			n++
		}
	}
	return sum + colGap*max(n-1, 0)
}

// table lays rows out under cols and returns the header line and one line per row. It fits
// the width by dropping the spare columns, then the droppable ones as long as even cut
// columns would not fit, then cutting the flexible ones, widest first, so numbers stay whole. lipgloss/table draws it; it does not choose the widths itself
// because it shrinks every column alike, which cuts byte counts in half. style colours a
// cell (nil: plain).
func (m watchModel) table(cols []column, rows [][]string, style func(row, col int) lipgloss.Style) []string {
	widths := fitColumns(cols, rows, m.width)
	var keep []int
	for c, w := range widths {
		if w > 0 {
			keep = append(keep, c)
		}
	}
	headers := make([]string, len(keep))
	for i, c := range keep {
		headers[i] = ansi.Truncate(cols[c].title, widths[c], "…")
	}
	cells := make([][]string, len(rows))
	for r, row := range rows {
		cells[r] = make([]string, len(keep))
		for i, c := range keep {
			cells[r][i] = ansi.Truncate(row[c], widths[c], "…")
		}
	}
	t := table.New().BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderHeader(false).BorderColumn(false).Wrap(false).Headers(headers...).Rows(cells...).
		StyleFunc(func(row, i int) lipgloss.Style {
			s := m.styles.plain
			if row == table.HeaderRow {
				s = m.styles.head
			} else if style != nil {
				s = style(row, keep[i])
			}
			if cols[keep[i]].right {
				s = s.Align(lipgloss.Right)
			}
			if i < len(keep)-1 {
				s = s.PaddingRight(colGap)
			}
			return s
		})
	lines := strings.Split(t.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return lines
}

// fitColumns returns each column's width (0: dropped) so that the table fits width (0: no
// limit), as table describes.
func fitColumns(cols []column, rows [][]string, width int) []int {
	widths := make([]int, len(cols))
	for c, col := range cols {
		widths[c] = ansi.StringWidth(col.title)
		for _, row := range rows {
			widths[c] = max(widths[c], ansi.StringWidth(row[c]))
		}
	}
	if width <= 0 {
		return widths
	}
	floor := func(c int) int {
		if cols[c].flex {
			return min(widths[c], max(cmp.Or(cols[c].min, defaultMin), ansi.StringWidth(cols[c].title)))
		}
		return widths[c]
	}
	floors := func() []int {
		f := make([]int, len(cols))
		for c := range cols {
			if widths[c] > 0 {
				f[c] = floor(c)
			}
		}
		return f
	}
	if tableWidth(widths) > width {
		for c, col := range cols {
			if col.spare {
				widths[c] = 0
			}
		}
	}
	for tableWidth(floors()) > width {
		drop := 0
		for c, col := range cols {
			if widths[c] > 0 {
				drop = max(drop, col.drop)
			}
		}
		if drop == 0 {
			break
		}
		for c, col := range cols {
			if col.drop == drop {
				widths[c] = 0
			}
		}
	}
	for excess := tableWidth(widths) - width; excess > 0; excess-- {
		widest := -1
		for c := range cols {
			if widths[c] > floor(c) && (widest < 0 || widths[c] > widths[widest]) {
				widest = c
			}
		}
		if widest < 0 {
			break
		}
		widths[widest]--
	}
	return widths
}
