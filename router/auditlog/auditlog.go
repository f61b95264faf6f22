// Package auditlog writes the flow log for audits ([log] flows): one JSON object per line
// for each flow when it ends and for each refused flow, to a file rotated by size.
//
// Add never blocks and never fails: records wait in a bounded queue (QueueSize) for the
// writer's goroutine, and a record that finds the queue full is dropped and counted; the
// next record written is preceded by one {"event":"dropped","count":N} line, so a reader
// knows the log has a gap. A write error is logged once per file and the records are
// dropped until Open succeeds again.
//
// The file is made mode 0600 (a flow log tells who went where; on Windows it takes its
// folder's ACL); when it would grow past Options.MaxSize it is renamed PATH.1 (PATH.1 to
// PATH.2, and so on) and a new PATH is started; at most Options.Keep old files are kept. The records hold no secret: the
// router's flow records carry none (a proxy is named, never its credentials).
//
// A Log is safe for concurrent use. Open may be called at any time (a reload): records
// queued before it go to the file that was open when they are written.
package auditlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	// DefaultMaxSize is the size a file is rotated at: 64 MiB holds about 200,000 records
	// (a record is 250 to 400 bytes), a busy agent's day.
	DefaultMaxSize = 64 << 20
	// DefaultKeep is how many rotated files are kept besides the current one.
	DefaultKeep = 5
	// QueueSize is how many records may wait for the writer.
	QueueSize = 8192
)

// Events of a record.
const (
	EventFlow    = "flow"    // a flow that was carried (or failed to connect) ended
	EventRefused = "refused" // a flow the router refused; Reason says why
	EventDropped = "dropped" // records lost because the queue was full
)

// Record is one line of the log. Zero fields are left out of the line.
type Record struct {
	Time     time.Time      `json:"time"`         // when the flow ended or was refused
	Event    string         `json:"event"`        // EventFlow, EventRefused, EventDropped
	ID       uint64         `json:"id,omitempty"` // the router's flow ID (as in its log)
	Network  string         `json:"network,omitempty"`
	Src      netip.AddrPort `json:"-"`
	App      string         `json:"app,omitempty"`
	PID      int            `json:"pid,omitempty"`
	Inbound  string         `json:"inbound,omitempty"`
	Caged    bool           `json:"caged,omitempty"`     // the policy found the flow caged
	Name     string         `json:"name,omitempty"`      // the destination's name, when known
	NameFrom string         `json:"name_from,omitempty"` // where the name came from: dns, sni, host
	// NameUntrusted: the name came from the flow's first bytes and won a direct verdict on
	// an address the client chose; the router dialed the name as its resolver resolves it
	// (Dialed), or refused the flow.
	NameUntrusted bool           `json:"name_untrusted,omitempty"`
	Dialed        netip.AddrPort `json:"-"` // where a direct flow by name connected
	Dst           netip.AddrPort `json:"-"`
	DstPort       uint16         `json:"-"`                  // with a name only (Dst invalid)
	Rule          string         `json:"rule,omitempty"`     // the deciding rule, or the implicit step
	Profile       string         `json:"profile,omitempty"`  // the guest's profile that decided it; "" for the default
	Action        string         `json:"action,omitempty"`   // direct, proxy or block (an ask is recorded as what it became)
	Upstream      string         `json:"upstream,omitempty"` // the proxy that carried it
	Up            int64          `json:"up,omitempty"`       // bytes from the client
	Down          int64          `json:"down,omitempty"`     // bytes to the client
	Duration      time.Duration  `json:"-"`
	Reason        string         `json:"reason,omitempty"` // the refusal reason (as router status names it)
	Asked         string         `json:"asked,omitempty"`  // a flow held under ask: once, run, always, deny or timeout
	Error         string         `json:"error,omitempty"`  // why a flow failed
	Count         uint64         `json:"count,omitempty"`  // EventDropped: records lost
}

// MarshalJSON writes r as the log does.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record // without this method
	l := struct {
		plain
		Src        string  `json:"src,omitempty"`
		Dst        string  `json:"dst,omitempty"`
		Dialed     string  `json:"dialed,omitempty"`
		DurationMS float64 `json:"duration_ms,omitempty"`
	}{plain: plain(r)}
	if r.Src.IsValid() {
		l.Src = r.Src.String()
	}
	if r.Dialed.IsValid() {
		l.Dialed = r.Dialed.String()
	}
	switch {
	case r.Dst.Addr().IsValid():
		l.Dst = r.Dst.String()
	case r.Name != "":
		l.Dst = r.Name + ":" + strconv.Itoa(int(r.DstPort))
	}
	if r.Duration > 0 {
		l.DurationMS = float64(r.Duration.Microseconds()) / 1000
	}
	return json.Marshal(l)
}

// UnmarshalJSON reads a line as MarshalJSON writes it (for readers of the log: router
// learn). A dst of the form name:port sets DstPort, the name being in its own field.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record // without this method
	var l struct {
		plain
		Src        string  `json:"src"`
		Dst        string  `json:"dst"`
		Dialed     string  `json:"dialed"`
		DurationMS float64 `json:"duration_ms"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	*r = Record(l.plain)
	if l.Dialed != "" {
		ap, err := netip.ParseAddrPort(l.Dialed)
		if err != nil {
			return fmt.Errorf("dialed: %w", err)
		}
		r.Dialed = ap
	}
	if l.Src != "" {
		ap, err := netip.ParseAddrPort(l.Src)
		if err != nil {
			return fmt.Errorf("src: %w", err)
		}
		r.Src = ap
	}
	if l.Dst != "" {
		if ap, err := netip.ParseAddrPort(l.Dst); err == nil {
			r.Dst = ap
		} else {
			i := strings.LastIndexByte(l.Dst, ':')
			p, perr := strconv.ParseUint(l.Dst[i+1:], 10, 16)
			if i < 0 || perr != nil {
				return fmt.Errorf("dst %q: neither address:port nor name:port", l.Dst)
			}
			r.DstPort = uint16(p)
		}
	}
	r.Duration = time.Duration(l.DurationMS * float64(time.Millisecond))
	return nil
}

// Options configures a Log. The zero value takes the defaults.
type Options struct {
	MaxSize int64 // bytes a file may reach before it is rotated; 0: DefaultMaxSize
	Keep    int   // rotated files kept; 0: DefaultKeep
	Log     *slog.Logger
}

// Log is the flow log. See the package documentation.
type Log struct {
	opts    Options
	queue   chan Record
	on      atomic.Bool   // a file is open: Add queues
	dropped atomic.Uint64 // records Add dropped since the last dropped line
	done    chan struct{}

	mu     sync.Mutex // guards the fields below; held by the writer while it writes
	path   string
	f      *os.File
	w      *bufio.Writer
	size   int64
	failed bool // a write failed: records are dropped until the next Open
	closed bool
}

// New returns a Log with no file open (Add drops nothing and writes nothing until Open).
// Its writer's goroutine runs until Close.
func New(opts Options) *Log {
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	l := &Log{opts: opts, queue: make(chan Record, QueueSize), done: make(chan struct{})}
	go l.run()
	return l
}

// Open makes path the log's file (appended to; made 0600 when new), closing the one before;
// "" closes it and writes no more. On error the log is left without a file.
func (l *Log) Open(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("auditlog: closed")
	}
	if path == l.path && l.f != nil && !l.failed {
		return nil
	}
	err := l.closeFile()
	l.path, l.failed = path, false
	if path == "" {
		l.on.Store(false)
		return err
	}
	if err := l.openFile(); err != nil {
		l.on.Store(false)
		return fmt.Errorf("open flow log: %w", err)
	}
	l.on.Store(true)
	return err
}

// openFile opens l.path for appending; l.mu is held.
func (l *Log) openFile() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.w, l.size = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	return nil
}

// closeFile flushes and closes the file; l.mu is held.
func (l *Log) closeFile() error {
	if l.f == nil {
		return nil
	}
	err := errors.Join(l.w.Flush(), l.f.Close())
	l.f, l.w = nil, nil
	return err
}

// On reports whether a file is open (Add would queue a record): a caller may skip
// building records when not.
func (l *Log) On() bool { return l.on.Load() }

// Add queues r to be written, without waiting: a full queue drops it (counted).
func (l *Log) Add(r Record) {
	if !l.on.Load() {
		return
	}
	select {
	case l.queue <- r:
	default:
		l.dropped.Add(1)
	}
}

// Close writes what is queued, closes the file and stops the writer. Add after Close
// drops records.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.on.Store(false)
	l.mu.Unlock()
	close(l.queue)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closeFile()
}

// run is the writer: it writes records as they come, and flushes when none wait.
func (l *Log) run() {
	defer close(l.done)
	for r := range l.queue {
		l.mu.Lock()
		if n := l.dropped.Swap(0); n > 0 {
			l.write(Record{Time: time.Now(), Event: EventDropped, Count: n})
		}
		l.write(r)
		if len(l.queue) == 0 && l.w != nil && !l.failed {
			if err := l.w.Flush(); err != nil {
				l.fail(err)
			}
		}
		l.mu.Unlock()
	}
}

// write writes one record, rotating first when it would take the file past MaxSize; l.mu
// is held.
func (l *Log) write(r Record) {
	if l.f == nil || l.failed {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		return // no field of Record fails to marshal
	}
	b = append(b, '\n')
	if l.size > 0 && l.size+int64(len(b)) > l.opts.MaxSize {
		if err := l.rotate(); err != nil {
			l.fail(err)
			return
		}
	}
	n, err := l.w.Write(b)
	l.size += int64(n)
	if err != nil {
		l.fail(err)
	}
}

// rotate renames PATH.(Keep-1) to PATH.Keep ... PATH to PATH.1 and opens a new PATH;
// l.mu is held.
func (l *Log) rotate() error {
	if err := l.closeFile(); err != nil {
		return err
	}
	for i := l.opts.Keep - 1; i >= 1; i-- {
		from := rotated(l.path, i)
		if _, err := os.Stat(from); err == nil {
			if err := os.Rename(from, rotated(l.path, i+1)); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(l.path, rotated(l.path, 1)); err != nil {
		return err
	}
	return l.openFile()
}

// rotated is the name of path's i-th rotated file (1: the newest).
func rotated(path string, i int) string { return path + "." + strconv.Itoa(i) }

// Files returns the flow log at path and its rotated files that exist, oldest first (for
// readers of the log: router learn); path itself is last, whether or not it exists.
func Files(path string) []string {
	var files []string
	for i := 1; ; i++ {
		name := rotated(path, i)
		if _, err := os.Stat(name); err != nil {
			break
		}
		files = append([]string{name}, files...)
	}
	return append(files, path)
}

// fail logs a write error once and drops records until the next Open; l.mu is held.
func (l *Log) fail(err error) {
	l.failed = true
	l.on.Store(false)
	l.opts.Log.Error("flow log: writing stopped until the next reload", "file", l.path, "err", err)
}
