// Package ask holds the flows the policy says to ask about (action ask) while an
// administrator answers, and keeps the answers.
//
// A held flow's connection was accepted and nothing was dialled for it. Flows are held by
// destination: every flow to one destination (a name, or an address without one, and a
// port) waits on one Prompt, however many connections and sources there are, and one
// answer releases them all:
//
//	Once    the flows held now go through; the next one asks again
//	Run     they go through, and so does every later flow to the destination until the
//	        daemon stops (the Desk remembers it; a reload keeps it)
//	Always  as Run, and the Desk's Always hook writes it down as a rule (the daemon: the
//	        router's own rules file, then a reload)
//	Deny    the flows held now are refused
//
// A guest past a budget with [budget] over = "ask" is asked about the same way (Budgets):
// its prompt's Host is the domain, its Port 0, its Budget the budget's name and its Rule
// the question; the guest waits as one source. Once lets the guest on for the rest of the
// budget's window for the domain, Run until the daemon stops, Always as Run (nothing is
// written: a budget is raised in the config), Deny refuses as over = "refuse" does.
//
// A flow that gets no answer within its timeout is refused (Timeout), whether or not
// anyone looked. Held flows are bounded per source and in all (Options): a flow past
// either bound is refused at once (ErrFull), so a guest that opens thousands of unknown
// destinations holds at most its share and never stops another source's flows.
//
// A Desk is safe for concurrent use; mu guards every field but the options.
package ask

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Answer is what an administrator said, or what happened without one.
type Answer uint8

const (
	None    Answer = iota // not answered
	Once                  // these flows, this time
	Run                   // until the daemon stops
	Always                // written as a rule
	Deny                  // refused
	Timeout               // no answer in time: refused
)

var answerNames = [...]string{None: "none", Once: "once", Run: "run", Always: "always", Deny: "deny", Timeout: "timeout"}

func (a Answer) String() string {
	if int(a) < len(answerNames) {
		return answerNames[a]
	}
	return fmt.Sprintf("answer(%d)", a)
}

// ParseAnswer parses "once", "run", "always" or "deny": the answers a person gives.
func ParseAnswer(s string) (Answer, bool) {
	switch s {
	case "once":
		return Once, true
	case "run":
		return Run, true
	case "always":
		return Always, true
	case "deny":
		return Deny, true
	}
	return None, false
}

// Approves reports whether a lets the flow through.
func (a Answer) Approves() bool { return a == Once || a == Run || a == Always }

// Key is a destination: its name when known (else its address) and its port.
type Key struct {
	Host string
	Port uint16
	// Budget and Guest are set for a budget's question (Budgets): the budget's name and the
	// guest's key; "" for a destination.
	Budget, Guest string
}

// Prompt is one pending question: a destination and the flows held for it.
type Prompt struct {
	ID    uint64
	Host  string
	Port  uint16
	Rule  string // the rule or step that asked
	Proxy string // where an approval sends the flows
	// Budget is the budget's name for a budget's question ("" for a destination).
	Budget string
	// Sources are the sources of the held flows (sorted, at most maxSources listed), Held
	// how many flows are held.
	Sources []string
	Held    int
	Since   time.Time // when the first held flow arrived
	Until   time.Time // when the last held flow times out
}

// ErrFull is the refusal of a flow past the held bounds.
var ErrFull = errors.New("ask: too many flows held")

// Options are a Desk's bounds and hooks.
type Options struct {
	MaxPerSource int // held flows per source; <= 0: 64
	MaxTotal     int // held flows in all; <= 0: 1024
	// Always writes an "always" answer down (nil: Always answers as Run; a budget's question
	// never calls it, and answers Always as Run). When it fails,
	// the answer is refused and the flows stay held.
	Always func(p Prompt, by string) error
	// Answered, when not nil, hears every answer given (the daemon logs it).
	Answered func(p Prompt, a Answer, by string)
	Now      func() time.Time // nil: time.Now
}

// Desk holds flows under ask. The zero Desk is not usable; use New.
type Desk struct {
	opts    Options
	mu      sync.Mutex
	prompts map[Key]*prompt
	byID    map[uint64]*prompt
	sources map[string]int // held flows by source
	total   int
	run     map[Key]bool // answered Run or Always
	nextID  uint64
}

type prompt struct {
	Prompt
	key     Key
	waiters map[*waiter]struct{}
	srcs    map[string]int
}

type waiter struct {
	src string
	end time.Time
	ch  chan Answer // buffered: one answer
}

const maxSources = 16

// New returns an empty Desk.
func New(opts Options) *Desk {
	if opts.MaxPerSource <= 0 {
		opts.MaxPerSource = 64
	}
	if opts.MaxTotal <= 0 {
		opts.MaxTotal = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Desk{opts: opts, prompts: map[Key]*prompt{}, byID: map[uint64]*prompt{}, sources: map[string]int{}, run: map[Key]bool{}}
}

// Hold holds one flow from src to k until it is answered, timeout passes (Timeout) or ctx
// ends (Deny). A destination approved for the run answers Run at once; a flow past the
// bounds gets Deny and ErrFull. rule and proxy describe the prompt (the first flow's).
func (d *Desk) Hold(ctx context.Context, k Key, src, rule, proxy string, timeout time.Duration) (Answer, error) {
	now := d.opts.Now()
	w := &waiter{src: src, end: now.Add(timeout), ch: make(chan Answer, 1)}
	d.mu.Lock()
	if d.run[k] {
		d.mu.Unlock()
		return Run, nil
	}
	if d.sources[src] >= d.opts.MaxPerSource || d.total >= d.opts.MaxTotal {
		d.mu.Unlock()
		return Deny, ErrFull
	}
	p := d.prompts[k]
	if p == nil {
		d.nextID++
		p = &prompt{Prompt: Prompt{ID: d.nextID, Host: k.Host, Port: k.Port, Rule: rule, Proxy: proxy, Budget: k.Budget, Since: now}, key: k,
			waiters: map[*waiter]struct{}{}, srcs: map[string]int{}}
		d.prompts[k], d.byID[p.ID] = p, p
	}
	p.waiters[w] = struct{}{}
	p.srcs[src]++
	d.sources[src]++
	d.total++
	d.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-w.ch:
		return a, nil
	case <-t.C:
		if a, ok := d.leave(k, p, w); ok {
			return a, nil // answered as the time ran out
		}
		return Timeout, nil
	case <-ctx.Done():
		if a, ok := d.leave(k, p, w); ok {
			return a, nil
		}
		return Deny, ctx.Err()
	}
}

// leave takes w out of p; when w was answered meanwhile, it returns that answer.
func (d *Desk) leave(k Key, p *prompt, w *waiter) (Answer, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := p.waiters[w]; !ok {
		return <-w.ch, true
	}
	d.drop(p, w)
	if len(p.waiters) == 0 {
		delete(d.prompts, k)
		delete(d.byID, p.ID)
	}
	return None, false
}

// drop forgets w's place; mu is held.
func (d *Desk) drop(p *prompt, w *waiter) {
	delete(p.waiters, w)
	if p.srcs[w.src]--; p.srcs[w.src] <= 0 {
		delete(p.srcs, w.src)
	}
	if d.sources[w.src]--; d.sources[w.src] <= 0 {
		delete(d.sources, w.src)
	}
	d.total--
}

// Pending returns the prompts waiting now, oldest first.
func (d *Desk) Pending() []Prompt {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Prompt, 0, len(d.prompts))
	for _, p := range d.prompts {
		out = append(out, p.snapshot())
	}
	slices.SortFunc(out, func(a, b Prompt) int { return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.ID, b.ID)) })
	return out
}

// snapshot is p as Pending shows it; mu is held.
func (p *prompt) snapshot() Prompt {
	s := p.Prompt
	s.Held = len(p.waiters)
	for src := range p.srcs {
		s.Sources = append(s.Sources, src)
	}
	slices.Sort(s.Sources)
	if len(s.Sources) > maxSources {
		s.Sources = s.Sources[:maxSources]
	}
	for w := range p.waiters {
		if w.end.After(s.Until) {
			s.Until = w.end
		}
	}
	return s
}

// Approved reports whether k was approved for the run (Run or Always).
func (d *Desk) Approved(k Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.run[k]
}

// Answer answers prompt id with a (Once, Run, Always or Deny) on behalf of by (who, for the
// log and the approved file). It fails for a prompt that is no longer pending, and for
// Always when the Always hook fails (the flows stay held).
func (d *Desk) Answer(id uint64, a Answer, by string) (Prompt, error) {
	switch a {
	case Once, Run, Always, Deny:
	default:
		return Prompt{}, fmt.Errorf("answer %v: not once, run, always or deny", a)
	}
	d.mu.Lock()
	p := d.byID[id]
	if p == nil {
		d.mu.Unlock()
		return Prompt{}, fmt.Errorf("answer prompt %d: not pending (answered, or its flows timed out)", id)
	}
	snap := p.snapshot()
	d.mu.Unlock()
	if a == Always && d.opts.Always != nil && snap.Budget == "" {
		// Outside mu: the hook writes a file and reloads.
		if err := d.opts.Always(snap, by); err != nil {
			return snap, fmt.Errorf("answer prompt %d: %w", id, err)
		}
	}
	k := p.key
	d.mu.Lock()
	if a == Run || a == Always {
		d.run[k] = true
	}
	if d.byID[id] == p {
		for w := range p.waiters {
			d.drop(p, w)
			w.ch <- a
		}
		delete(d.prompts, k)
		delete(d.byID, id)
	}
	d.mu.Unlock()
	if d.opts.Answered != nil {
		d.opts.Answered(snap, a, by)
	}
	return snap, nil
}
