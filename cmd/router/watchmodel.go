package main

// The watch screen's state and what changes it (bubbletea's Model and Update): polled
// status, the keys, the filter and the sort; watchview.go draws it.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/agentcage/router/router/control"
)

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
	src statusSource
	// answer answers an ask prompt (the control channel's "answer"); nil: watch answers none.
	answer   func(id uint64, answer string) error
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
	case answeredMsg:
		m.notice, m.noticeUntil = "answered "+msg.what, msg.at.Add(noticeFor)
		if msg.err != nil {
			m.notice = "answer " + msg.what + ": " + msg.err.Error()
		}
		return m, m.poll()
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
	case "o", "r", "A", "d": // answer the oldest prompt: once, for this run, always, deny
		if m.answer == nil || m.shown == nil || len(m.shown.Asks) == 0 {
			return m, nil
		}
		p, a := m.shown.Asks[0], map[string]string{"o": "once", "r": "run", "A": "always", "d": "deny"}[string(k.Runes)]
		answer, clock := m.answer, m.clock
		return m, func() tea.Msg {
			err := answer(p.ID, a)
			return answeredMsg{what: fmt.Sprintf("%s:%d %s", p.Host, p.Port, a), err: err, at: clock()}
		}
	}
	return m, nil
}

// answeredMsg is the outcome of an answer given from the keyboard.
type answeredMsg struct {
	what string
	err  error
	at   time.Time
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
