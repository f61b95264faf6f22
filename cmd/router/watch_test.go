package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/agentcage/router/router/control"
)

// watchNow is the time of the fake daemon's answers.
var watchNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// sampleStatus is a daemon with three live flows: the fastest is the youngest but one, the
// oldest carried the most bytes.
func sampleStatus() *control.Status {
	return &control.Status{
		Started: watchNow.Add(-time.Hour), Config: "/etc/router/config.toml",
		Totals: control.Totals{Flows: 40, Live: 3, Up: 5 << 20, Down: 300 << 20, Refused: 6},
		Rules: []control.RuleStat{
			{Index: 1, Name: "model-direct", Action: "direct", Hits: 3, Bytes: 40 << 10},
			{Index: 2, Name: "hypervisor", Action: "proxy", Proxy: "exit", Hits: 30, Bytes: 300 << 20},
			{Index: 3, Name: "telemetry", Action: "block", Hits: 5},
			{Index: 0, Name: "(host off limits)", Action: "block", Hits: 1},
		},
		Refusals: []control.RefusalStat{
			{Reason: "rule", Count: 5, Recent: []control.Refused{{At: watchNow.Add(-20 * time.Second), Src: "10.0.2.15:41000", Dst: "192.0.2.80:443", Host: "telemetry.example.com", Rule: "telemetry"}}},
			{Reason: "guest-udp", Count: 1, Recent: []control.Refused{{At: watchNow.Add(-3 * time.Minute), Src: "10.0.2.15:5353", Dst: "224.0.0.251:5353"}}},
		},
		Upstreams: []control.UpstreamStat{
			{Name: "exit", State: "up", Since: watchNow.Add(-time.Hour), Latency: 38 * time.Millisecond},
			{Name: "backup", State: "down", Since: watchNow.Add(-2 * time.Minute), Failures: 3, LastError: "connect 203.0.113.9:1080: connection refused"},
		},
		Flows: []control.FlowStat{
			{ID: 11, Src: "10.0.2.15:40100", Dst: "198.18.0.7:443", Host: "github.com", Rule: "hypervisor", Action: "proxy", Proxy: "exit",
				Age: 5 * time.Minute, Up: 1 << 20, Down: 250 << 20, UpRate: 100, DownRate: 2 << 10},
			{ID: 12, Src: "10.0.2.15:40200", Dst: "198.18.0.9:443", Host: "registry.npmjs.org", Rule: "hypervisor", Action: "proxy", Proxy: "exit",
				Age: 20 * time.Second, Up: 20 << 10, Down: 40 << 20, UpRate: 1 << 10, DownRate: 3 << 20},
			{ID: 13, Src: "10.0.2.15:40300", Dst: "10.0.2.2:47831", App: "VBoxHeadless", Rule: "model-direct", Action: "direct",
				Age: 2 * time.Second, Up: 4 << 10, Down: 9 << 10},
		},
		DNS: control.DNSStat{Mode: "fake-ip", Pool: "198.18.0.0/15", PoolSize: 131072, Mapped: 9, InUse: 2},
	}
}

// fakeDaemon is a status source whose answers the test sets; it counts the polls.
type fakeDaemon struct {
	st    *control.Status
	err   error
	polls int
}

func (d *fakeDaemon) source() (*control.Status, error) {
	d.polls++
	return d.st, d.err
}

// plainStyles draw without colour; colourStyles with the 16 ANSI colours.
func plainStyles() watchStyles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	return newWatchStyles(r)
}

func colourStyles() watchStyles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	return newWatchStyles(r)
}

// newTestWatch is a model polling d, sized w×h, after its first poll answered.
func newTestWatch(t *testing.T, d *fakeDaemon, w, h int) watchModel {
	t.Helper()
	m := newWatchModel(d.source, time.Second, "/run/router/control.sock", plainStyles())
	m.clock = func() time.Time { return watchNow }
	m = update(t, m, tea.WindowSizeMsg{Width: w, Height: h})
	return pollOnce(t, m)
}

// update applies msg and returns the new model.
func update(t *testing.T, m watchModel, msg tea.Msg) watchModel {
	t.Helper()
	next, _ := m.Update(msg)
	return next.(watchModel)
}

// pollOnce runs the poll command the model asks for, as bubbletea would, and applies the
// answer; it checks that the answer schedules the next tick.
func pollOnce(t *testing.T, m watchModel) watchModel {
	t.Helper()
	next, cmd := m.Update(tickMsg{})
	if cmd == nil {
		t.Fatal("a tick did not poll")
	}
	msg := cmd()
	if _, ok := msg.(statusMsg); !ok {
		t.Fatalf("the poll returned %T, want statusMsg", msg)
	}
	next, cmd = next.(watchModel).Update(msg)
	if cmd == nil {
		t.Fatal("an answer did not schedule the next tick")
	}
	return next.(watchModel)
}

func keys(t *testing.T, m watchModel, ks ...string) watchModel {
	t.Helper()
	for _, k := range ks {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "backspace":
			msg = tea.KeyMsg{Type: tea.KeyBackspace}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		m = update(t, m, msg)
	}
	return m
}

// flowLines are the rows of the flows table in a frame, without the "more" line.
func flowLines(view string) []string {
	lines := strings.Split(view, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "LIVE FLOWS") {
			continue
		}
		var rows []string
		for _, r := range lines[min(i+2, len(lines)):] {
			if r == "" || strings.HasPrefix(r, "… ") || strings.HasPrefix(r, "no live flow") || strings.HasPrefix(r, "q quit") {
				break
			}
			rows = append(rows, r)
		}
		return rows
	}
	return nil
}

// flowOrder is the flow IDs in the order the frame shows them (with its ID column).
func flowOrder(view string) []string {
	var ids []string
	for _, l := range flowLines(view) {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

func TestWatchFrame(t *testing.T) {
	d := &fakeDaemon{st: sampleStatus()}
	m := newTestWatch(t, d, 160, 40)
	v := m.View()
	t.Logf("frame:\n%s", v)
	for _, want := range []string{
		"router watch  running 1h0m0s  config /etc/router/config.toml  dns fake-ip (9 names, 2 in use)",
		"flows 40  live 3  up 5.0 MiB  down 300.0 MiB  refused 6",
		"exit      up     1h0m0s     38ms",
		"backup    down     2m0s        -  connect 203.0.113.9:1080: connection refused",
		"LIVE FLOWS 3, by rate",
		"198.18.0.9:443 (registry.npmjs.org)",
		"10.0.2.15:40300 VBoxHeadless",
		"proxy via exit",
		"3.0 MiB/s",
		"rule           5  10.0.2.15:41000 → 192.0.2.80:443 (telemetry.example.com), by telemetry, 20s ago",
		"#2 hypervisor      proxy via exit     30  300.0 MiB",
		"q quit  p pause  s sort: rate  / filter  ? help",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("missing %q", want)
		}
	}
	if got := strings.Join(flowOrder(v), " "); got != "12 11 13" {
		t.Errorf("order by rate: %s, want 12 11 13", got)
	}
}

func TestWatchSort(t *testing.T) {
	m := newTestWatch(t, &fakeDaemon{st: sampleStatus()}, 160, 40)
	for _, c := range []struct{ sort, order string }{
		{"age", "13 12 11"},
		{"bytes", "11 12 13"},
		{"rate", "12 11 13"},
	} {
		m = keys(t, m, "s")
		v := m.View()
		if got := strings.Join(flowOrder(v), " "); got != c.order {
			t.Errorf("sort %s: %s, want %s", c.sort, got, c.order)
		}
		if !strings.Contains(v, "LIVE FLOWS 3, by "+c.sort) || !strings.Contains(v, "s sort: "+c.sort) {
			t.Errorf("sort %s not shown:\n%s", c.sort, v)
		}
	}
}

func TestWatchFilter(t *testing.T) {
	m := newTestWatch(t, &fakeDaemon{st: sampleStatus()}, 160, 40)
	m = keys(t, m, "/", "N", "p", "m")
	if !m.editing || !strings.Contains(m.View(), "filter: Npm_") {
		t.Fatalf("typing a filter:\n%s", m.View())
	}
	if got := strings.Join(flowOrder(m.View()), " "); got != "12" { // applies as typed, any case
		t.Errorf("filter npm: flows %s, want 12", got)
	}
	m = keys(t, m, "enter")
	v := m.View()
	if m.editing || !strings.Contains(v, `LIVE FLOWS 1 of 3 match "Npm"`) || !strings.Contains(v, "Esc clears the filter") {
		t.Errorf("after Enter:\n%s", v)
	}
	// / starts a new filter; q and p while typing are text, not commands.
	m = keys(t, m, "/", "backspace", "q", "p")
	if m.filter != "qp" || m.paused {
		t.Errorf("typing q and p: filter %q, paused %v", m.filter, m.paused)
	}
	if v := m.View(); len(flowOrder(v)) != 0 || !strings.Contains(v, "no live flow matches") {
		t.Errorf("filter with no match:\n%s", v)
	}
	m = keys(t, m, "esc")
	if m.filter != "" || m.editing || len(flowOrder(m.View())) != 3 {
		t.Errorf("Esc did not clear the filter: %q", m.filter)
	}
	// Keys sent in one write (tmux send-keys, a fast typist) come as one message.
	m = keys(t, m, "s/git", "enter")
	if m.sort != sortAge || m.filter != "git" || m.editing {
		t.Errorf("keys in one message: sort %v, filter %q, editing %v", m.sort, m.filter, m.editing)
	}
	m = keys(t, m, "esc", "s", "s")
	if next, _ := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q"), Paste: true}); next.(watchModel).editing || m.filter != "" {
		t.Error("a paste outside the filter did something")
	}
	// Esc then p, read together, come as Alt+p: the filter is cleared and the view paused.
	m = keys(t, m, "/", "x")
	m = update(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("p"), Alt: true})
	if m.filter != "" || m.editing || !m.paused {
		t.Errorf("Esc p read together: filter %q, editing %v, paused %v", m.filter, m.editing, m.paused)
	}
	m = keys(t, m, "p")
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("sq")}); cmd == nil {
		t.Error("q after s in one message does not quit")
	}
	for _, c := range []struct{ text, want string }{
		{"", "12 11 13"},
		{"model-direct", "13"},        // rule
		{"HYPERV", "12 11"},           // part of a rule, any case
		{"vboxheadless", "13"},        // app
		{"10.0.2.15:40100", "11"},     // source
		{"10.0.2.15", "12 11 13"},     // every source
		{"198.18.0.9", "12"},          // destination
		{"47831", "13"},               // a destination port
		{"npmjs", "12"},               // host
		{"direct", "13"},              // action
		{"exit", "12 11"},             // upstream
		{"proxy via exit", ""},        // the shown action text is not searched, its fields are
		{"github.com registry", ""},   // the whole text must match one field
		{"telemetry.example.com", ""}, // a refusal is no flow
	} {
		m.filter = c.text
		if got := strings.Join(flowOrder(m.View()), " "); got != c.want {
			t.Errorf("filter %q: flows %q, want %q", c.text, got, c.want)
		}
	}
}

func TestWatchPause(t *testing.T) {
	d := &fakeDaemon{st: sampleStatus()}
	m := newTestWatch(t, d, 160, 40)
	m = keys(t, m, "p")
	if v := m.View(); !strings.Contains(v, " PAUSED ") || !strings.Contains(v, "frozen at 12:00:00") || !strings.Contains(v, "p resume") {
		t.Errorf("paused:\n%s", v)
	}
	// The daemon moves on; the frozen view does not.
	st := sampleStatus()
	st.Flows = st.Flows[:1]
	st.Totals.Live = 1
	d.st = st
	m = pollOnce(t, m)
	if d.polls != 2 {
		t.Errorf("polls while paused: %d, want 2 (polling goes on)", d.polls)
	}
	if got := len(flowOrder(m.View())); got != 3 {
		t.Errorf("paused view shows %d flows, want the frozen 3", got)
	}
	m = keys(t, m, "p")
	if v := m.View(); strings.Contains(v, "PAUSED") || len(flowOrder(v)) != 1 || !strings.Contains(v, "live 1") {
		t.Errorf("after resume, want the latest answer at once:\n%s", v)
	}
}

func TestWatchQuit(t *testing.T) {
	m := newTestWatch(t, &fakeDaemon{st: sampleStatus()}, 160, 40)
	for _, k := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("q")}, {Type: tea.KeyCtrlC}} {
		_, cmd := m.Update(k)
		if cmd == nil {
			t.Fatalf("%v: no command", k)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%v does not quit", k)
		}
	}
	// ctrl-c quits while typing a filter too; q is text there.
	m = keys(t, m, "/")
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyCtrlC}); cmd == nil {
		t.Error("ctrl-c in the filter does not quit")
	}
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}); cmd != nil {
		t.Error("q in the filter quits")
	}
}

func TestWatchHelp(t *testing.T) {
	m := newTestWatch(t, &fakeDaemon{st: sampleStatus()}, 160, 40)
	if strings.Contains(m.View(), "hide this help") {
		t.Error("help shown before ?")
	}
	m = keys(t, m, "?")
	if v := m.View(); !strings.Contains(v, "?: hide this help") || !strings.Contains(v, "Enter keeps it, Esc clears it") {
		t.Errorf("help:\n%s", v)
	}
}

// TestWatchFits: every frame fits the window, and flows that do not fit are counted.
func TestWatchFits(t *testing.T) {
	st := sampleStatus()
	for i := range 50 {
		st.Flows = append(st.Flows, control.FlowStat{ID: uint64(100 + i), Src: fmt.Sprintf("10.0.2.15:%d", 50000+i),
			Dst: "198.18.0.20:443", Host: "objects.githubusercontent.com", Rule: "hypervisor", Action: "proxy", Proxy: "exit", Age: time.Minute})
	}
	d := &fakeDaemon{st: st}
	for _, size := range [][2]int{{160, 40}, {120, 30}, {80, 24}, {60, 15}, {40, 10}, {20, 5}, {10, 2}, {200, 200}, {1, 1}} {
		w, h := size[0], size[1]
		m := newTestWatch(t, d, w, h)
		for _, mm := range []watchModel{m, keys(t, m, "?"), keys(t, m, "/", "x"), keys(t, m, "s", "p")} {
			v := mm.View()
			lines := strings.Split(v, "\n")
			if len(lines) > h {
				t.Errorf("%dx%d: %d lines", w, h, len(lines))
			}
			for _, l := range lines {
				if n := ansi.StringWidth(l); n > w {
					t.Errorf("%dx%d: a line %d wide: %q", w, h, n, l)
				}
			}
		}
		v := m.View()
		shown := len(flowLines(v))
		more := fmt.Sprintf("… %d more flows", len(st.Flows)-shown)
		switch {
		case h >= 15 && (shown < 3 || !strings.Contains(v, more)) && h < 100:
			t.Errorf("%dx%d: shows %d flows, want 3 or more and %q:\n%s", w, h, shown, more, v)
		case h >= 100 && shown != len(st.Flows):
			t.Errorf("%dx%d: shows %d flows, want all %d", w, h, shown, len(st.Flows))
		}
	}
	// At 80 columns the numbers stay whole: names are cut, the ID column goes first.
	m := newTestWatch(t, d, 80, 24)
	v := m.View()
	t.Logf("80x24:\n%s", v)
	for _, want := range []string{"3.0 MiB/s", "registry.npmjs.org:443", "VBoxHeadless", "hypervisor", "model-direct"} {
		if !strings.Contains(v, want) {
			t.Errorf("80 columns: no %q", want)
		}
	}
	// Without a size (a frame printed to a file) nothing is cut.
	m = newTestWatch(t, d, 0, 0)
	if got := len(flowLines(m.View())); got != len(st.Flows) {
		t.Errorf("unsized frame shows %d flows, want %d", got, len(st.Flows))
	}
}

func TestWatchReconnect(t *testing.T) {
	d := &fakeDaemon{st: sampleStatus()}
	m := newTestWatch(t, d, 160, 40)
	// The daemon goes away: the last frame stays, with the error above it.
	d.st, d.err = nil, errors.New("connect to the running router at /run/router/control.sock: connection refused")
	m.clock = func() time.Time { return watchNow.Add(3 * time.Second) }
	m = pollOnce(t, m)
	m.clock = func() time.Time { return watchNow.Add(4 * time.Second) }
	m = pollOnce(t, m)
	v := m.View()
	if !strings.Contains(v, "cannot reach the router since 12:00:03, retrying every 1s: connect to the running router") || len(flowOrder(v)) != 3 {
		t.Errorf("daemon gone:\n%s", v)
	}
	// The same daemon answers again.
	d.st, d.err = sampleStatus(), nil
	m.clock = func() time.Time { return watchNow.Add(6 * time.Second) }
	m = pollOnce(t, m)
	if v := m.View(); !strings.Contains(v, "reconnected at 12:00:06 (unreachable for 3s)") || strings.Contains(v, "cannot reach") {
		t.Errorf("reconnected:\n%s", v)
	}
	// The notice passes.
	m.clock = func() time.Time { return watchNow.Add(20 * time.Second) }
	m = pollOnce(t, m)
	if v := m.View(); strings.Contains(v, "reconnected") {
		t.Errorf("notice still shown after %v:\n%s", noticeFor, v)
	}
	// A new daemon (another start time): its counters start again, the view says so.
	st := sampleStatus()
	st.Started = watchNow.Add(25 * time.Second)
	d.st = st
	m.clock = func() time.Time { return watchNow.Add(30 * time.Second) }
	m = pollOnce(t, m)
	if v := m.View(); !strings.Contains(v, "the router restarted at 12:00:25") || !strings.Contains(v, "running 5s") {
		t.Errorf("restarted:\n%s", v)
	}
	// Before any answer the screen says what it waits for.
	d.err, d.st = errors.New("no such file"), nil
	m = newWatchModel(d.source, time.Second, "/run/router/control.sock", plainStyles())
	m = pollOnce(t, m)
	if v := m.View(); !strings.Contains(v, "waiting for the router at /run/router/control.sock") || !strings.Contains(v, "cannot reach the router") {
		t.Errorf("never reached:\n%s", v)
	}
}

func TestWatchColours(t *testing.T) {
	d := &fakeDaemon{st: sampleStatus()}
	m := newTestWatch(t, d, 160, 40)
	m.styles = colourStyles()
	v := m.View()
	for _, want := range []string{
		"\x1b[32mup", "\x1b[31mdown", // upstream states
		"\x1b[35mproxy via exit", "\x1b[36mdirect", "\x1b[1;31mblock", // actions
		"\x1b[35mhypervisor", // a rule in its action's colour
	} {
		if !strings.Contains(v, want) {
			t.Errorf("missing %q in %q", want, v)
		}
	}
	// Without colours (a pipe, NO_COLOR) no escape sequence at all.
	m.styles = plainStyles()
	if v := m.View(); strings.Contains(v, "\x1b[") {
		t.Errorf("plain frame has escapes: %q", v)
	}
}

func TestWatchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"watch", "--interval", "1ms"},
		{"watch", "--sort", "name"},
		{"watch", "extra"},
	} {
		if _, _, code := run(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	// No daemon at a path in a directory that does not exist (not t.TempDir: Wine cannot
	// remove one).
	sock := filepath.Join(os.TempDir(), fmt.Sprintf("router-watch-test-%d-none", os.Getpid()), "control.sock")
	if _, errOut, code := run(t, "watch", "--once", "--socket", sock); code != exitFindings || !strings.Contains(errOut, "is the router running?") {
		t.Errorf("no daemon: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run(t, "watch", "--socket", sock); code != exitUsage || !strings.Contains(errOut, "not a terminal") {
		t.Errorf("not a terminal: exit %d, %s", code, errOut)
	}
}

// TestWatchManyRows: thousands of rules and flows are counted, and only what fits is drawn.
func TestWatchManyRows(t *testing.T) {
	st := sampleStatus()
	for i := range 10000 {
		st.Rules = append(st.Rules, control.RuleStat{Index: 5 + i, Name: fmt.Sprintf("rule-%d", i), Action: "direct"})
	}
	for i := range 5000 {
		st.Flows = append(st.Flows, control.FlowStat{ID: uint64(100 + i), Src: "10.0.2.15:1", Dst: "192.0.2.1:443", Rule: "hypervisor", Action: "proxy"})
	}
	m := newTestWatch(t, &fakeDaemon{st: st}, 120, 40)
	v := m.View()
	shown := len(flowLines(v))
	for _, want := range []string{fmt.Sprintf("… %d more flows", 5003-shown), "… 10003 more rules"} {
		if !strings.Contains(v, want) {
			t.Errorf("no %q in:\n%s", want, v)
		}
	}
	if n := strings.Count(v, "\n") + 1; n != 40 {
		t.Errorf("%d lines, want 40", n)
	}
}

// TestWatchAsking: the pending ask prompts are on screen first, one line per destination,
// with how to answer them.
func TestWatchAsking(t *testing.T) {
	st := sampleStatus()
	st.Asks = []control.Prompt{{ID: 3, Host: "new.example", Port: 443, Held: 12, Sources: []string{"vm 10.0.2.15"}, Rule: "(caged: no rule decides; ask)", Until: watchNow.Add(20 * time.Second)}}
	m := newTestWatch(t, &fakeDaemon{st: st}, 160, 40)
	v := m.View()
	for _, want := range []string{"ASKING", "new.example:443", "12", "vm 10.0.2.15", "20s", "o once  r this run  A always  d deny"} {
		if !strings.Contains(v, want) {
			t.Errorf("the screen lacks %q:\n%s", want, v)
		}
	}
	if strings.Index(v, "ASKING") > strings.Index(v, "UPSTREAM") {
		t.Errorf("the prompts are not first:\n%s", v)
	}
}

// TestWatchAnswers: a key answers the oldest prompt over the control channel, says so,
// and polls again.
func TestWatchAnswers(t *testing.T) {
	st := sampleStatus()
	st.Asks = []control.Prompt{{ID: 3, Host: "new.example", Port: 443, Held: 1}, {ID: 4, Host: "later.example", Port: 80, Held: 1}}
	d := &fakeDaemon{st: st}
	m := newTestWatch(t, d, 160, 40)
	var got []string
	m.answer = func(id uint64, a string) error { got = append(got, fmt.Sprint(id, " ", a)); return nil }
	next, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("A")})
	if cmd == nil {
		t.Fatal("the key did nothing")
	}
	m = next.(watchModel)
	next, cmd = m.Update(cmd())
	m = next.(watchModel)
	if len(got) != 1 || got[0] != "3 always" {
		t.Errorf("answered %v, want the oldest prompt (3) always", got)
	}
	if !strings.Contains(m.View(), "answered new.example:443 always") || cmd == nil {
		t.Errorf("no notice, or no poll after the answer:\n%s", m.View())
	}
}
