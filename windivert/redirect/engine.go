package redirect

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentcage/router/internal/clock"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/refusal"
	"github.com/agentcage/router/windivert/packet"
)

// Options are the engine's collaborators and limits. ListenerPort is required; every other
// field may be left zero (nil collaborators mean "not available", zero limits their
// defaults).
type Options struct {
	Log *slog.Logger // nil: discard

	// BeforeClose, when set, is called by Run with the device's error when Run ends
	// because the device failed (not when its context ends), before the device closes:
	// the device closes when it returns. The Windows platform drops the guard's permits
	// there, so that nothing passes uncaptured between the failure and the close.
	BeforeClose func(error)

	// ListenerPort is the router's transparent listener. Reflected flows are addressed to
	// it; outbound packets from it to a reflected peer are the return path.
	ListenerPort uint16
	// DNSPort is where the DNS server accepts TCP; DNS over TCP is reflected there. Zero
	// refuses TCP port 53 with a RST.
	DNSPort uint16
	// DNS answers UDP port 53. Nil drops DNS over UDP (fail closed).
	DNS DNSHandler
	// DNSWorkers bounds the DNS queries answered at once; more are dropped (the client
	// retries). Default 64.
	DNSWorkers int
	// UDP relays the UDP flows that need the router (a proxy verdict, a fake IP, a decision
	// a host-name rule could change). Nil drops them (fail closed).
	UDP UDPRelay
	// Names tells fake-IP pool addresses (always reflected) and, when it knows them, the
	// names of destinations for host-name rules. Nil: no pool, no names.
	Names Names
	// Profile picks the Policy a flow is decided by, from the engine's and the flow (its
	// owner and name known as the engine knows them): the profile its guest is switched to
	// (router profile, router.Router.ProfileFor), else the engine's. Nil: the engine's. It is
	// called with the engine's lock held and must not block.
	Profile func(p *policy.Policy, f *policy.Flow) *policy.Policy

	// Events are connect events with PIDs (WinDivert's SOCKET layer). With Events, every
	// new flow waits up to EventWait for its event (default 50 ms), then asks Lookup.
	Events    EventSource
	EventWait time.Duration
	// EventTTL is how long a connect event waits for its first packet. Default 30 s.
	EventTTL time.Duration
	// Resolver describes the PID of an event (image name, path, services). Nil: owners
	// known by PID only.
	Resolver PIDResolver
	// Lookup finds the owner of a socket by its addresses: the fallback when no event
	// came, and the only source without Events. Nil: owners stay unknown.
	Lookup LookupFunc
	// OwnPIDs are the router's own processes: their flows always pass.
	OwnPIDs []uint32

	// ReflectTo are the local addresses (at most one IPv4 and one IPv6) that reflected
	// flows are addressed to. Unset for a family, a flow is reflected to the app's own
	// address (WinDivert: the app is on this host). A TUN needs them: a forwarded flow's
	// source is not an address of the host.
	ReflectTo []netip.Addr
	// ReflectDirect reflects flows with a direct verdict too (the router then dials them
	// with its own socket), for devices that cannot pass packets (a TUN).
	ReflectDirect bool

	// MaxFlows bounds the table (default 65536 entries). Within it, the entries of flows
	// passed for this host's own processes (not caged: a P2P app, a game) may take at most
	// MaxHostFlows (default three quarters), and flows still waiting for their owner at
	// most MaxPending (default an eighth), so that neither can refuse a caged flow. When the
	// host's share is full, its oldest passed UDP entry makes room (a later datagram of that
	// flow is decided anew); a host TCP flow finding no such entry is refused.
	MaxFlows, MaxHostFlows, MaxPending int
	// Idle expires a TCP flow without packets (default 2h10m, above the 2 h keepalive
	// interval of Windows and Linux); UDPIdle a UDP decision (default 60 s); Linger a TCP
	// flow after a RST or a FIN each way, counted from its last packet (default 30 s).
	Idle, UDPIdle, Linger time.Duration
	// TimeWait is how long the peer address of an expired reflected flow is not reused
	// for a new one, so that a new connection does not meet the listener's TIME_WAIT
	// socket of the old one (default 4 min).
	TimeWait time.Duration
	// SweepEvery is the expiry period (default 1 s).
	SweepEvery time.Duration
	// Batch is the number of packets per Device.Read (default 64) and BufferSize the read
	// buffer (default 256 KiB; at least 65575 bytes, the largest packet WinDivert hands out).
	Batch, BufferSize int

	Clock clock.Clock // nil: the system clock; tests substitute a fake one

	// Refusals counts the flows the engine refuses or drops, by reason, once per flow (its
	// later packets are counted in Stats only). Nil: the engine keeps its own (Refusals).
	Refusals *refusal.Book
	// Audit is the flow log for audits ([log] flows): every flow the engine refuses is
	// added to it, as the router adds those it refuses. Nil: none.
	Audit *auditlog.Log
}

// Stats are counters since New. Flows are new flows decided; the packet counters count
// packets.
type Stats struct {
	Packets       uint64 // packets read from the device
	Reflected     uint64 // flows reflected to a listener
	Passed        uint64 // flows passed (direct, own, served by the host, allowed to exist)
	Refused       uint64 // TCP flows refused with a RST (block, DoT, no room, unknown tuple)
	DroppedFlows  uint64 // UDP flows dropped (block verdicts; proxy verdicts and pool addresses without Options.UDP)
	UDPRelayed    uint64 // datagrams handed to Options.UDP
	Dropped       uint64 // packets dropped
	CannotPass    uint64 // packets to pass that the device could not send (a TUN)
	Unknown       uint64 // outbound TCP packets of no known flow (refused)
	DNSAnswered   uint64 // DNS queries answered
	Events        uint64 // connect events received
	EventTimeouts uint64 // new flows whose event did not come within EventWait
	LookupErrors  uint64 // owner lookups that failed
	WriteErrors   uint64 // device writes that failed (other than CannotPass)
	TableFull     uint64 // new flows refused because the table (or the pending share) was full
	Evicted       uint64 // the host's passed UDP entries dropped to make room
	Active        int    // entries in the table now
	HostFlows     int    // of which the host's own passed flows
	Pending       int    // of which flows waiting for their owner
}

type counters struct {
	packets, reflected, passed, refused, droppedFlows, dropped, cannotPass, unknown,
	dnsAnswered, events, eventTimeouts, lookupErrors, writeErrors, tableFull, evicted, udpRelayed atomic.Uint64
}

// Engine is the redirect engine; see the package documentation. Create it with New, start
// it with Run.
type Engine struct {
	dev    Device
	opts   Options
	log    *slog.Logger
	clock  clock.Clock
	start  time.Time
	pol    atomic.Pointer[policy.Policy]
	own    map[uint32]bool // immutable after New
	refl4  netip.Addr
	refl6  netip.Addr
	dnsSem chan struct{}
	book   *refusal.Book   // Options.Refusals, or the engine's own
	ctx    context.Context // for DNS answers; cancelled when Run returns
	cancel context.CancelFunc

	// workers counts the goroutines started by the engine; Run waits for them. Owner
	// lookups are added while e.mu is held and stopped is false, so none is added after
	// Run's final Wait began.
	workers  sync.WaitGroup
	running  atomic.Bool
	closeDev sync.Once
	ob       outbox // inputBatch's sends, owned by the goroutine that calls it

	mu       sync.Mutex
	flows    map[flowKey]*flow        // every entry, by original 5-tuple
	byPeer   map[netip.AddrPort]*flow // reflected entries, by the peer the listener sees
	pendByEv map[evKey]*flow          // pending entries waiting for their event
	events   map[evKey]evEntry        // connect events not yet matched
	recent   map[netip.AddrPort]int64 // peers of expired reflected flows -> reusable after
	stopped  bool                     // Run has returned: timers and workers do nothing
	hostN    int                      // entries of the host's own passed flows (flow.host)
	pendingN int                      // entries waiting for their owner (flow.pending)
	hostUDP  list.List                // the host's passed UDP entries, oldest first (*flow)

	st counters
}

// New returns an engine over dev deciding with p (nil: an empty config). It starts nothing;
// Run does.
func New(dev Device, p *policy.Policy, opts Options) (*Engine, error) {
	if dev == nil {
		return nil, errors.New("redirect: no device")
	}
	if opts.ListenerPort == 0 {
		return nil, errors.New("redirect: listener port is required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.EventWait, 50*time.Millisecond)
	def(&opts.EventTTL, 30*time.Second)
	def(&opts.Idle, 2*time.Hour+10*time.Minute)
	def(&opts.UDPIdle, time.Minute)
	def(&opts.Linger, 30*time.Second)
	def(&opts.TimeWait, 4*time.Minute)
	def(&opts.SweepEvery, time.Second)
	if opts.MaxFlows <= 0 {
		opts.MaxFlows = 1 << 16
	}
	if opts.MaxHostFlows <= 0 || opts.MaxHostFlows > opts.MaxFlows {
		opts.MaxHostFlows = max(1, opts.MaxFlows*3/4)
	}
	if opts.MaxPending <= 0 || opts.MaxPending > opts.MaxFlows {
		opts.MaxPending = max(1, opts.MaxFlows/8)
	}
	if opts.DNSWorkers <= 0 {
		opts.DNSWorkers = 64
	}
	if opts.Batch <= 0 {
		opts.Batch = 64
	}
	if opts.BufferSize < 65575 {
		opts.BufferSize = 256 << 10
	}
	e := &Engine{
		dev:      dev,
		opts:     opts,
		log:      opts.Log,
		clock:    opts.Clock,
		own:      map[uint32]bool{},
		dnsSem:   make(chan struct{}, opts.DNSWorkers),
		book:     opts.Refusals,
		flows:    map[flowKey]*flow{},
		byPeer:   map[netip.AddrPort]*flow{},
		pendByEv: map[evKey]*flow{},
		events:   map[evKey]evEntry{},
		recent:   map[netip.AddrPort]int64{},
	}
	if e.book == nil {
		e.book = new(refusal.Book)
	}
	e.start = e.clock.Now()
	e.ctx, e.cancel = context.WithCancel(context.Background())
	for _, pid := range opts.OwnPIDs {
		e.own[pid] = true
	}
	for _, a := range opts.ReflectTo {
		a = a.Unmap()
		switch {
		case a.Is4() && !e.refl4.IsValid():
			e.refl4 = a
		case a.Is6() && !e.refl6.IsValid():
			e.refl6 = a
		default:
			return nil, fmt.Errorf("redirect: reflect-to address %v: at most one IPv4 and one IPv6 address", a)
		}
	}
	e.SetPolicy(p)
	return e, nil
}

// SetPolicy replaces the decision for new flows (nil: an empty config); flows already
// decided keep their decision.
func (e *Engine) SetPolicy(p *policy.Policy) {
	if p == nil {
		p = policy.New(nil, policy.Env{})
	}
	e.pol.Store(p)
}

// now is the engine's time in nanoseconds since New.
func (e *Engine) now() int64 { return int64(e.clock.Now().Sub(e.start)) }

// Run reads packets from the device and handles them until ctx is done (then it returns
// nil) or the device fails (then the error). Either way it closes the device, stops the
// engine's timers and waits for its worker goroutines before it returns. Run may be called
// once. OriginalDst, Owner and Flow keep answering from the table afterwards. On a device
// failure, Options.BeforeClose runs before the device closes.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("redirect: Run called twice")
	}
	done := make(chan struct{})
	stopClose := context.AfterFunc(ctx, e.closeDevice)
	defer func() {
		stopClose()
		close(done)
		e.closeDevice()
		e.cancel()
		e.mu.Lock()
		e.stopped = true
		for _, f := range e.flows {
			if f.stop != nil {
				f.stop()
			}
		}
		e.mu.Unlock()
		e.workers.Wait()
	}()
	if e.opts.Events != nil {
		e.workers.Go(func() { e.readEvents(done) })
	}
	e.workers.Go(func() {
		t := time.NewTicker(e.opts.SweepEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.mu.Lock()
				e.sweepLocked(e.now())
				e.mu.Unlock()
			}
		}
	})
	buf := make([]byte, e.opts.BufferSize)
	metas := make([]Meta, e.opts.Batch)
	for {
		n, count, err := e.dev.Read(buf, metas)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			err = fmt.Errorf("redirect: read: %w", err)
			if e.opts.BeforeClose != nil {
				e.opts.BeforeClose(err)
			}
			return err
		}
		e.inputBatch(buf[:n], metas[:count])
	}
}

func (e *Engine) closeDevice() {
	e.closeDev.Do(func() {
		if err := e.dev.Close(); err != nil {
			e.log.Debug("close device", "err", err)
		}
	})
}

func (e *Engine) readEvents(done <-chan struct{}) {
	evs := make([]SocketEvent, 64)
	for {
		n, err := e.opts.Events.ReadEvents(evs)
		if err != nil {
			select {
			case <-done:
			default:
				e.log.Error("socket events stopped; new flows now wait for the fallback lookup", "err", err)
			}
			return
		}
		for _, ev := range evs[:n] {
			e.Event(ev)
		}
	}
}

// inputBatch handles packets that lie back to back in b, with their metadata, and sends
// what they give before it returns (one WriteBatch on a BatchDevice). One goroutine at a
// time calls it (Run's; tests call it directly): e.ob is its scratch.
func (e *Engine) inputBatch(b []byte, metas []Meta) {
	now := e.now()
	ob := &e.ob
	defer e.flush(ob)
	for _, m := range metas {
		if len(b) == 0 {
			return
		}
		p, err := packet.Parse(b)
		if err != nil {
			// The length of this packet is unknown, so are the following ones.
			e.st.packets.Add(1)
			e.st.dropped.Add(1)
			e.log.Debug("unparsable packet dropped", "err", err, "bytes", len(b))
			return
		}
		e.input(ob, p, m, now)
		b = b[p.Len():]
	}
}

// FlowInfo is what the engine knows of a reflected flow.
type FlowInfo struct {
	Src, Dst   netip.AddrPort // the original source (the app) and destination
	Owner      rules.Owner    // the owning process, when OwnerKnown
	OwnerKnown bool
	Verdict    rules.Verdict // the engine's verdict (zero for DNS and pool flows)
}

// Flow returns the reflected flow whose packets reach the listener from peer (the accepted
// connection's remote address).
func (e *Engine) Flow(peer netip.AddrPort) (FlowInfo, bool) {
	peer = unmapAP(peer)
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.byPeer[peer]
	if f == nil {
		return FlowInfo{}, false
	}
	return FlowInfo{Src: f.key.src, Dst: f.key.dst, Owner: f.owner, OwnerKnown: f.ownerKnown, Verdict: f.verdict}, true
}

// OriginalDst returns where the connection c, accepted by a listener the engine reflects
// to, was going (router.Options.OriginalDst).
func (e *Engine) OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, errors.New("redirect: original destination: no remote address")
	}
	peer := unmapAP(ra.AddrPort())
	e.mu.Lock()
	f := e.byPeer[peer]
	var dst netip.AddrPort
	var port uint16
	if f != nil {
		dst, port = f.key.dst, f.to.Port()
	}
	e.mu.Unlock()
	if f == nil {
		return netip.AddrPort{}, fmt.Errorf("redirect: original destination of %v: not a reflected connection", peer)
	}
	if la, ok := c.LocalAddr().(*net.TCPAddr); ok && uint16(la.Port) != port {
		return netip.AddrPort{}, fmt.Errorf("redirect: original destination of %v: reflected to port %d, accepted on %d", peer, port, la.Port)
	}
	return dst, nil
}

// Original returns the app's address and the original destination of a connection the
// listener accepted from a reflected flow (router.Options.Original).
func (e *Engine) Original(c *net.TCPConn) (src, dst netip.AddrPort, err error) {
	dst, err = e.OriginalDst(c)
	if err != nil {
		return netip.AddrPort{}, netip.AddrPort{}, err
	}
	fi, ok := e.Flow(unmapAP(c.RemoteAddr().(*net.TCPAddr).AddrPort()))
	if !ok {
		return netip.AddrPort{}, netip.AddrPort{}, errors.New("redirect: original source: the flow ended")
	}
	return fi.Src, dst, nil
}

// Owner returns the process of the reflected flow whose peer is src
// (router.Options.Owner; dst is ignored): the owner found when the flow was decided, or
// else the Lookup answer for its original addresses. Flows from VM networks have none.
func (e *Engine) Owner(src, _ netip.AddrPort) (rules.Owner, error) {
	fi, ok := e.Flow(src)
	if !ok {
		return rules.Owner{}, fmt.Errorf("redirect: owner of %v: not a reflected connection", src)
	}
	if fi.OwnerKnown {
		return fi.Owner, nil
	}
	if e.pol.Load().FromVMNetwork(fi.Src.Addr()) {
		return rules.Owner{}, fmt.Errorf("redirect: owner of %v: a VM flow has no local process", fi.Src)
	}
	if e.opts.Lookup == nil {
		return rules.Owner{}, fmt.Errorf("redirect: owner of %v: unknown", fi.Src)
	}
	return e.opts.Lookup(packet.ProtoTCP, fi.Src, fi.Dst)
}

// AllowExisting registers a TCP connection that existed before the engine started (local
// is this host's end), so that its packets pass instead of being refused as unknown.
func (e *Engine) AllowExisting(local, remote netip.AddrPort) {
	key := flowKey{proto: packet.ProtoTCP, src: unmapAP(local), dst: unmapAP(remote)}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.flows[key]; ok || len(e.flows) >= e.opts.MaxFlows || !e.admitHostLocked() {
		return
	}
	f := &flow{key: key, state: statePass, last: now, created: now}
	e.flows[key] = f
	e.markHostLocked(f)
}

// Refusals returns the flows refused or dropped so far, by reason, with the latest of each.
func (e *Engine) Refusals() []refusal.Stat { return e.book.Snapshot() }

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	active, host, pending := len(e.flows), e.hostN, e.pendingN
	e.mu.Unlock()
	c := &e.st
	return Stats{
		Packets: c.packets.Load(), Reflected: c.reflected.Load(), Passed: c.passed.Load(),
		Refused: c.refused.Load(), DroppedFlows: c.droppedFlows.Load(), Dropped: c.dropped.Load(),
		CannotPass: c.cannotPass.Load(), Unknown: c.unknown.Load(), DNSAnswered: c.dnsAnswered.Load(),
		Events: c.events.Load(), EventTimeouts: c.eventTimeouts.Load(), LookupErrors: c.lookupErrors.Load(),
		WriteErrors: c.writeErrors.Load(), TableFull: c.tableFull.Load(), Evicted: c.evicted.Load(), UDPRelayed: c.udpRelayed.Load(),
		Active: active, HostFlows: host, Pending: pending,
	}
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
