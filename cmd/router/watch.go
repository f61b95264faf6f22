package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/term"
	"github.com/muesli/termenv"

	"github.com/agentcage/router/router/control"
)

func cmdWatch(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("watch",
		"A live view of the running daemon, refreshed every interval: totals, upstream health, the\n"+
			"live flows with their rule, action, bytes and rates, what was refused and why, and each\n"+
			"rule's flows and bytes. Keys: q quit, p pause, s sort, / filter, ? help. It needs no mouse\n"+
			"and works over SSH and in a Windows console; --once prints one frame for scripts.\n"+
			"Like status, it needs root / Administrators to open the control channel.", stderr)
	cfgPath, socket := controlFlags(fs)
	interval := fs.Duration("interval", time.Second, "how often to ask the daemon (100ms to 1h)")
	sortBy := fs.String("sort", "rate", "order the flows by `rate`, age or bytes")
	once := fs.Bool("once", false, "print one frame as text and exit (no terminal needed)")
	noAlt := fs.Bool("no-altscreen", false, "draw in the normal screen, not the alternate one (the last frame stays on exit)")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if *interval < 100*time.Millisecond || *interval > time.Hour {
		fmt.Fprintf(stderr, "router watch: --interval %v is outside 100ms to 1h\n", *interval)
		return exitUsage
	}
	key, ok := parseSortKey(*sortBy)
	if !ok {
		fmt.Fprintf(stderr, "router watch: --sort %q: want rate, age or bytes\n", *sortBy)
		return exitUsage
	}
	path, err := controlPath(*cfgPath, *socket)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	r := lipgloss.NewRenderer(stdout) // colours as stdout takes them: none in a pipe or with NO_COLOR
	m := newWatchModel(controlSource(path, 5*time.Second), *interval, path, newWatchStyles(r))
	m.answer = controlAnswer(path, 5*time.Second)
	m.sort = key
	tty, width, height := terminal(stdout)

	if *once {
		// A Windows console shows colours only with its escape sequences on (the full screen
		// view has bubbletea turn them on); elsewhere this does nothing.
		if restore, err := termenv.EnableVirtualTerminalProcessing(r.Output()); err != nil {
			r.SetColorProfile(termenv.Ascii)
		} else {
			defer restore()
		}
		st, err := m.src()
		if err != nil {
			fmt.Fprintf(stderr, "router watch: %v\n", err)
			return exitFindings
		}
		m = m.withStatus(statusMsg{st: st, at: time.Now()})
		m.width = width // a printed frame may be as tall as it needs
		fmt.Fprintln(stdout, m.View())
		return exitOK
	}
	if !tty {
		fmt.Fprintln(stderr, "router watch: the output is not a terminal (--once prints one frame without one)")
		return exitUsage
	}
	m.width, m.height = width, height
	opts := []tea.ProgramOption{tea.WithOutput(stdout)}
	if !*noAlt {
		opts = append(opts, tea.WithAltScreen())
	}
	if _, err := tea.NewProgram(m, opts...).Run(); err != nil {
		fmt.Fprintf(stderr, "router watch: %v\n", err)
		return exitFindings
	}
	return exitOK
}

// terminal tells whether w is a terminal, and its size if it is.
func terminal(w io.Writer) (tty bool, width, height int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(f.Fd()) {
		return false, 0, 0
	}
	width, height, err := term.GetSize(f.Fd())
	if err != nil {
		return true, 0, 0
	}
	return true, width, height
}

// controlSource asks the daemon at path for its status, on a new connection each time, each
// poll bounded by timeout. A kept connection would save little: the daemon ends every control
// connection 10 s after accepting it, busy or not, so a watcher would redial every 10 s anyway,
// and dialling a local socket or pipe is cheap next to building the status. One connection
// per poll also makes a restarted daemon nothing special: the next poll reaches the new one.
func controlSource(path string, timeout time.Duration) statusSource {
	return func() (*control.Status, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := dialControl(ctx, path)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.Close() }) // bounds Do too
		defer stop()
		resp, err := c.Do(control.Request{Op: "status"})
		if err != nil {
			return nil, fmt.Errorf("ask the router for its status: %w", err)
		}
		return resp.Status, nil
	}
}

// controlAnswer answers an ask prompt over the control channel at path, as `router ask` does.
func controlAnswer(path string, timeout time.Duration) func(id uint64, answer string) error {
	return func(id uint64, answer string) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := dialControl(ctx, path)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Do(control.Request{Op: "answer", ID: id, Answer: answer, By: "router watch"})
		return err
	}
}
