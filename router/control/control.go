// Package control is the local channel between the running daemon and the `router status`,
// `router watch` and `router explain` commands: one JSON request per line, one JSON answer per line.
//
// Only an administrator can open it: on Linux a unix socket of root's with mode 0600 (see
// Listen; a shared directory such as /tmp is left as it is), on Windows a named pipe under
// \\.\pipe\ProtectedPrefix\Administrators whose security descriptor lets only SYSTEM and
// elevated Administrators in. Nothing secret crosses it (no password is ever part of an
// answer), but flows and names are private.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/agentcage/router/internal/accept"
)

// Request is one question to the daemon.
type Request struct {
	Op   string     `json:"op"`            // "status", "name", "asks", "answer", "console", "reload" or "profile"
	Addr netip.Addr `json:"addr,omitzero"` // for "name"
	// ID and Answer ("once", "run", "always" or "deny") answer a pending prompt ("answer");
	// By says who answers, for the log and the approved rules file.
	ID     uint64 `json:"id,omitempty"`
	Answer string `json:"answer,omitempty"`
	By     string `json:"by,omitempty"`
	// Guest (a VM network's CIDR, a guest's address, or app:NAME) and Profile switch a guest's
	// profile ("profile").
	Guest   string `json:"guest,omitempty"`
	Profile string `json:"profile,omitempty"`
}

// Response is the daemon's answer; Error is set when the request failed.
type Response struct {
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
	Name   string  `json:"name,omitempty"`
	Fake   bool    `json:"fake,omitempty"` // the address belongs to the fake-IP pool
	// URL is the web console's address with its token ("console"); "" when it is off.
	URL string `json:"url,omitempty"`
	// Asks are the pending prompts ("asks"; "answer": the one answered), oldest first.
	Asks []Prompt `json:"asks,omitempty"`
	// Switch is a profile switch done ("profile").
	Switch *ProfileSwitch `json:"switch,omitempty"`
	// Config is the config running after a "reload": the new one, or (the reload refused,
	// Error set) the one that stays, with the refusal.
	Config *ConfigStat `json:"config,omitempty"`
}

// ConfigStat is the config the daemon runs: the SHA-256 of its file's bytes as loaded,
// when it was loaded, the reloads since the start by outcome, and the last reload refused
// (nil when none was).
type ConfigStat struct {
	SHA256      string         `json:"sha256,omitempty"`
	Loaded      time.Time      `json:"loaded,omitzero"`
	Reloads     uint64         `json:"reloads"` // applied
	Refused     uint64         `json:"refused"` // refused; the running config stayed
	LastRefused *RefusedReload `json:"last_refused,omitempty"`
}

// RefusedReload is a reload the daemon refused: when, and why (the config's own error,
// which names file, line and key and never a secret).
type RefusedReload struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
}

// Reloader is the part of a Handler that reloads the config on request; a Handler without
// it refuses "reload".
type Reloader interface {
	// Reload reads the config file again and applies it, all or nothing, and returns the
	// config running afterwards; err is why the new file was refused.
	Reload() (ConfigStat, error)
}

// Prompt is one destination the router asks about, and the flows it holds for it.
type Prompt struct {
	ID      uint64    `json:"id"`
	Host    string    `json:"host"` // a name, or an address without one
	Port    uint16    `json:"port"`
	Rule    string    `json:"rule"`            // the rule or step that asked
	Proxy   string    `json:"proxy,omitempty"` // where an approval sends the flows
	Sources []string  `json:"sources"`         // of the held flows (the first few)
	Held    int       `json:"held"`            // flows held now
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"` // when the last held flow times out
}

// Asker is the part of a Handler that holds flows under ask; a Handler without it answers
// "asks" with none and refuses "answer".
type Asker interface {
	Pending() []Prompt
	// Answer answers prompt id ("once", "run", "always", "deny") on behalf of by.
	Answer(id uint64, answer, by string) (Prompt, error)
}

// Status is what `router status` shows. Counts run from the daemon's start, except the
// rules' (from the last reload that changed the rule list).
type Status struct {
	Started time.Time `json:"started"`
	Config  string    `json:"config"`
	// Running is the config running: its hash and load time, and the reloads.
	Running ConfigStat `json:"running,omitzero"`
	// PID is the daemon's process id: `router cleanup --force` stops it by this number.
	PID       int            `json:"pid"`
	Guard     GuardStat      `json:"guard"`
	Budgets   BudgetStat     `json:"budgets"`
	Totals    Totals         `json:"totals"`
	Rules     []RuleStat     `json:"rules"`
	Refusals  []RefusalStat  `json:"refusals"`
	Upstreams []UpstreamStat `json:"upstreams"`
	Flows     []FlowStat     `json:"flows"`
	DNS       DNSStat        `json:"dns"`
	// Caged are the caged processes of this host whose flows the router decided (the
	// user-space NATs carrying guests), the one seen last first.
	Caged []CagedStat `json:"caged,omitempty"`
	// KernelCaged are this host's processes whose sockets the kernel marks as caged (Linux),
	// as its program decides: by the executable each runs or a caged ancestor runs,
	// whatever it calls itself.
	KernelCaged []KernelCagedStat `json:"kernel_caged,omitempty"`
	// Asks are the pending ask prompts, oldest first (as op "asks" lists them), so that
	// `router watch` and the console show them with the rest.
	Asks []Prompt `json:"asks,omitempty"`
	// Warnings are what the daemon finds wrong as it runs: a known hypervisor's process
	// that runs uncaged, whose guests' traffic leaves as this host's own.
	Warnings []string `json:"warnings,omitempty"`
	// Profiles are the guests switched to a profile other than the default, by guest;
	// ProfileNames the profiles the config defines, "default" first.
	Profiles     []GuestProfile `json:"profiles,omitempty"`
	ProfileNames []string       `json:"profile_names,omitempty"`
	// DomainBudgets are the [budget] counts of each guest and registrable domain in the
	// guest's current window: bytes up (bytes_up_per_domain), then distinct names
	// (names_per_domain), each by guest then domain, the MaxDomainBudgets largest of each;
	// none without a budget.
	DomainBudgets []DomainBudgetStat `json:"domain_budgets,omitempty"`
}

// CagedStat is one caged process: its flows decided and refused since the daemon started,
// and when the last one was.
type CagedStat struct {
	Name    string    `json:"name"`
	PID     int       `json:"pid"`
	Flows   uint64    `json:"flows"`
	Refused uint64    `json:"refused"`
	Last    time.Time `json:"last"`
}

// KernelCagedStat is one process the kernel cages.
type KernelCagedStat struct {
	PID  int    `json:"pid"`
	Exe  string `json:"exe"`            // its executable's file name
	Comm string `json:"comm,omitempty"` // the name it goes by, when another
	// By and ByPID are the caged ancestor it is caged as a child of, when its own
	// executable is not caged.
	By    string `json:"by,omitempty"`
	ByPID int    `json:"by_pid,omitempty"`
}

// Totals sum up everything since the daemon started.
type Totals struct {
	Flows   uint64 `json:"flows"`   // decided, refused ones included
	Live    int    `json:"live"`    // running now
	Up      uint64 `json:"up"`      // bytes from the clients (ended and live flows)
	Down    uint64 `json:"down"`    // bytes to the clients
	Refused uint64 `json:"refused"` // refusals of every reason, the kernel's included
}

// GuardStat is the health of the fail-closed guard while the daemon runs.
type GuardStat struct {
	// Watched is set when the daemon watches its guard and restores it when something
	// else changes or removes it (Linux).
	Watched bool `json:"watched"`
	// Restores counts the restores; LastRestore is the time of the last one and LastDamage
	// what was found then.
	Restores    int       `json:"restores"`
	LastRestore time.Time `json:"last_restore,omitzero"`
	LastDamage  string    `json:"last_damage,omitempty"`
	// Rivals (Windows) are other products' WFP sublayers evaluated before the guard's, each
	// with its hard permits at the guard's layers and what they defeat.
	Rivals []string `json:"rivals,omitempty"`
	// GuardedApps (Windows) are the executables the guard blocks when no router runs;
	// Unguarded the caged images it cannot name (caged by the capture while it runs only).
	GuardedApps []string `json:"guarded_apps,omitempty"`
	Unguarded   []string `json:"unguarded,omitempty"`
}

// BudgetStat is what the flows hold of the daemon's budgets: transparent flows alive (being
// set up or relayed) and their budget, set-up slots in use and flows waiting for one,
// forward flows and their budget, inbound connections (every inbound) and their budget.
type BudgetStat struct {
	Flows         int `json:"flows"`
	FlowBudget    int `json:"flow_budget"`
	Setups        int `json:"setups"`
	SetupWaiting  int `json:"setup_waiting"`
	Forwards      int `json:"forwards"`
	ForwardBudget int `json:"forward_budget"`
	Inbounds      int `json:"inbounds"`
	InboundBudget int `json:"inbound_budget"`
}

// MaxDomainBudgets bounds the counts of each [budget] a Status carries.
const MaxDomainBudgets = 100

// The budgets of a DomainBudgetStat, by their [budget] key.
const (
	BudgetBytesUp = "bytes_up_per_domain" // bytes up to the domain (or address, for flows without a name)
	BudgetNames   = "names_per_domain"    // distinct names looked up under the domain
)

// DomainBudgetStat is one guest's count of one [budget] for one registrable domain in the
// guest's current window, against the budget Limit.
type DomainBudgetStat struct {
	Budget string    `json:"budget"` // BudgetBytesUp or BudgetNames
	Guest  string    `json:"guest"`
	Domain string    `json:"domain"`
	Used   int64     `json:"used"`
	Limit  int64     `json:"limit"`
	Ends   time.Time `json:"ends"` // the window's end
	Over   bool      `json:"over"` // Used is past Limit
}

// RuleStat is a rule (or an implicit step, Index 0) and the flows it decided since the
// daemon started or the last reload (every reload starts the counts again), with their
// bytes (ended and live flows).
type RuleStat struct {
	Index  int    `json:"index"` // 1-based; 0 for an implicit step (Name says which)
	Name   string `json:"name"`
	Action string `json:"action"`
	Proxy  string `json:"proxy,omitempty"`
	Hits   uint64 `json:"hits"`
	Bytes  uint64 `json:"bytes"`
	// Disabled: the rule is kept in the file with enabled = false and decides nothing.
	Disabled bool `json:"disabled,omitempty"`
}

// RefusalStat is one reason of refusal: how many, counted where, and the latest.
type RefusalStat struct {
	Reason string    `json:"reason"` // refusal.Reason names: "rule", "guest-udp", "icmp", ...
	Count  uint64    `json:"count"`
	Recent []Refused `json:"recent,omitempty"` // newest first
}

// Refused is one refusal.
type Refused struct {
	At   time.Time `json:"at"`
	Src  string    `json:"src,omitempty"`
	Dst  string    `json:"dst,omitempty"`
	Host string    `json:"host,omitempty"`
	App  string    `json:"app,omitempty"`
	Rule string    `json:"rule,omitempty"`
	// Request is a refused HTTP request's method and path (model-api refusals).
	Request string `json:"request,omitempty"`
}

// UpstreamStat is one proxy in use and its health.
type UpstreamStat struct {
	Name      string        `json:"name"`
	State     string        `json:"state"` // "unknown", "up" or "down"
	Since     time.Time     `json:"since,omitzero"`
	Failures  int           `json:"failures,omitempty"`   // in a row
	LastError string        `json:"last_error,omitempty"` // never holds a password
	Latency   time.Duration `json:"latency_ns,omitempty"` // of the last good set-up
}

// FlowStat is one live flow. Rates are bytes per second over the last second or so.
type FlowStat struct {
	ID       uint64        `json:"id"`
	Src      string        `json:"src"`
	Dst      string        `json:"dst"`
	Host     string        `json:"host,omitempty"`
	NameFrom string        `json:"name_from,omitempty"` // where Host came from: "dns", "sni", "host"
	Inbound  string        `json:"inbound,omitempty"`   // the inbound that took it; "" for a captured flow
	App      string        `json:"app,omitempty"`
	PID      int           `json:"pid,omitempty"`
	Rule     string        `json:"rule"`
	Action   string        `json:"action"`
	Proxy    string        `json:"proxy,omitempty"`
	Via      string        `json:"via,omitempty"` // the failover member that carries it
	Age      time.Duration `json:"age_ns"`
	Up       uint64        `json:"up"`
	Down     uint64        `json:"down"`
	UpRate   uint64        `json:"up_rate"`
	DownRate uint64        `json:"down_rate"`
}

// DNSStat describes the DNS side.
type DNSStat struct {
	Mode     string `json:"mode"`
	Pool     string `json:"pool,omitempty"`
	PoolSize int    `json:"pool_size,omitempty"`
	Mapped   int    `json:"mapped,omitempty"`
	InUse    int    `json:"in_use,omitempty"`
}

// Handler answers requests; the daemon implements it.
type Handler interface {
	Status() Status
	// NameFor returns the name behind addr and whether addr is a fake-IP pool address.
	NameFor(addr netip.Addr) (name string, fake, ok bool)
}

// maxLine bounds a request.
const maxLine = 4096

// MaxConns is the connections the control channel serves at once: its share of the
// descriptor budget. A connection beyond it is closed at once (a client retries).
const MaxConns = 32

// Serve answers connections on ln until ctx is done or ln is closed; it closes ln. It
// returns nil then: an accept error is retried after a pause (logged once per pause, at
// most once a second), never returned. At most MaxConns connections are served at once.
func Serve(ctx context.Context, ln net.Listener, h Handler, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	slots := make(chan struct{}, MaxConns)
	var logged time.Time
	return accept.Loop(ctx, ln, ln.Accept, func(err error, pause time.Duration) {
		if time.Since(logged) >= time.Second {
			log.Warn("control accept failed; retrying", "err", err, "pause", pause)
			logged = time.Now()
		}
	}, func(c net.Conn) {
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			return
		}
		go func() {
			defer func() { <-slots }()
			serveConn(c, h, log)
		}()
	})
}

// connTimeout bounds a control connection; a reload (which reads, checks and installs a
// config) may take longer than any other answer, and has reloadTimeout.
const (
	connTimeout   = 10 * time.Second
	reloadTimeout = 30 * time.Second
)

func serveConn(c net.Conn, h Handler, log *slog.Logger) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(connTimeout))
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 512), maxLine)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			if req.Op == "reload" {
				c.SetDeadline(time.Now().Add(reloadTimeout))
			}
			resp = answer(req, h)
		}
		if err := enc.Encode(resp); err != nil {
			log.Debug("control write", "err", err)
			return
		}
	}
}

func answer(req Request, h Handler) Response {
	switch req.Op {
	case "status":
		st := h.Status()
		return Response{Status: &st}
	case "name":
		if !req.Addr.IsValid() {
			return Response{Error: "name: addr is required"}
		}
		name, fake, ok := h.NameFor(req.Addr.Unmap())
		if !ok {
			return Response{Fake: fake, Error: "no name known for " + req.Addr.String()}
		}
		return Response{Name: name, Fake: fake}
	case "console":
		c, ok := h.(interface{ ConsoleURL() string })
		if !ok || c.ConsoleURL() == "" {
			return Response{Error: "the console is off: set [console] listen (e.g. 127.0.0.1:9478) and restart the router"}
		}
		return Response{URL: c.ConsoleURL()}
	case "asks":
		a, ok := h.(Asker)
		if !ok {
			return Response{}
		}
		return Response{Asks: a.Pending()}
	case "answer":
		a, ok := h.(Asker)
		if !ok {
			return Response{Error: "answer: this daemon asks nothing"}
		}
		by := "router ask"
		if req.By != "" {
			by = req.By
		}
		p, err := a.Answer(req.ID, req.Answer, by)
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{Asks: []Prompt{p}}
	case "reload":
		rl, ok := h.(Reloader)
		if !ok {
			return Response{Error: "reload: this daemon reloads on SIGHUP only"}
		}
		cs, err := rl.Reload()
		if err != nil {
			return Response{Config: &cs, Error: err.Error()}
		}
		return Response{Config: &cs}
	case "profile":
		return answerProfile(req, h)
	}
	return Response{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// Client asks the daemon.
type Client struct {
	c  net.Conn
	sc *bufio.Scanner
}

// Dial connects to the daemon's control channel at path (DefaultPath when empty).
func Dial(ctx context.Context, path string) (*Client, error) {
	if path == "" {
		path = DefaultPath
	}
	c, err := dial(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("connect to the running router at %s: %w", path, err)
	}
	return &Client{c: c, sc: newScanner(c)}, nil
}

func newScanner(c net.Conn) *bufio.Scanner {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	return sc
}

// Close closes the connection.
func (cl *Client) Close() error { return cl.c.Close() }

// Do sends req and returns the answer; an answer with Error set is returned as an error too.
func (cl *Client) Do(req Request) (Response, error) {
	return cl.DoTimeout(req, 10*time.Second)
}

// DoTimeout is Do waiting up to d for the answer.
func (cl *Client) DoTimeout(req Request, d time.Duration) (Response, error) {
	cl.c.SetDeadline(time.Now().Add(d))
	b, _ := json.Marshal(req)
	if _, err := cl.c.Write(append(b, '\n')); err != nil {
		return Response{}, fmt.Errorf("control: %w", err)
	}
	if !cl.sc.Scan() {
		err := cl.sc.Err()
		if err == nil {
			err = errors.New("connection closed")
		}
		return Response{}, fmt.Errorf("control: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(cl.sc.Bytes(), &resp); err != nil {
		return Response{}, fmt.Errorf("control: %w", err)
	}
	if resp.Error != "" {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}
