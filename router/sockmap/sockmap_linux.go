package sockmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Config sizes a Map.
type Config struct {
	// Pairs is how many flows the map holds at once (two sockets each).
	Pairs int
	// Budget is the most bytes one direction may have queued on its peer's psock (beyond
	// the peer's send buffer) before the program stops redirecting it; 0: DefaultBudget.
	Budget uint32
}

// DefaultBudget is Config.Budget's default: the splice relay holds up to a pipe of 1 MiB
// per direction, so a direction holds no more here.
const DefaultBudget = 1 << 20

// The state of one socket as the source of its direction, in the shared array map (one
// entry per socket, its slot). The program is its only writer after Add.
const (
	offRedirected = 0  // u64: bytes redirected to the peer
	offPassed     = 8  // u64: bytes passed to the socket's own receive queue
	offSent       = 16 // u64: bytes the caller wrote to the peer since Add (SetSent)
	offPassing    = 24 // u32: 1 while the program passes instead of redirecting
	offTrips      = 28 // u32: how many times the program stopped redirecting
	offSeqSet     = 32 // u32: 1 once offSeq holds the peer's write_seq
	offSeq        = 36 // u32: the peer's write_seq when the program first ran
	stateSize     = 40
)

// Map is the loaded program, its maps and the shared counters. Its methods are safe for
// concurrent use; a Flow's pair is the caller's to allocate (0 ≤ pair < Config.Pairs, one
// flow per pair at a time).
type Map struct {
	prog   *ebpf.Program
	socks  *ebpf.Map // SOCKMAP: slot -> socket; pair p holds slots 2p and 2p+1
	state  *ebpf.Map // ARRAY, mmapable: slot -> counters (offXxx)
	cookie *ebpf.Map // HASH: socket cookie -> slot
	ring   *ebpf.Map // RINGBUF: the slots that stopped redirecting
	events *ringbuf.Reader
	mem    []byte // state, mapped
	pairs  int
	closed atomic.Bool
}

// Load assembles the program, loads it, creates its maps and attaches it. It fails when the
// kernel refuses any of it (no CAP_BPF, no BTF, a kernel without sockmap); the caller then
// relays without it.
func Load(cfg Config) (_ *Map, err error) {
	if cfg.Pairs <= 0 || cfg.Pairs > 1<<20 {
		return nil, fmt.Errorf("sockmap: %d pairs: want 1 to %d", cfg.Pairs, 1<<20)
	}
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
	}
	seqOff, err := writeSeqOffset()
	if err != nil {
		return nil, err
	}
	m := &Map{pairs: cfg.Pairs}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	slots := uint32(2 * cfg.Pairs)
	if m.socks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "router_socks", Type: ebpf.SockMap, KeySize: 4, ValueSize: 4, MaxEntries: slots}); err != nil {
		return nil, fmt.Errorf("sockmap: create socket map: %w", err)
	}
	if m.state, err = ebpf.NewMap(&ebpf.MapSpec{Name: "router_state", Type: ebpf.Array, KeySize: 4, ValueSize: stateSize, MaxEntries: slots, Flags: unix.BPF_F_MMAPABLE}); err != nil {
		return nil, fmt.Errorf("sockmap: create state map: %w", err)
	}
	if m.cookie, err = ebpf.NewMap(&ebpf.MapSpec{Name: "router_cookies", Type: ebpf.Hash, KeySize: 8, ValueSize: 4, MaxEntries: slots}); err != nil {
		return nil, fmt.Errorf("sockmap: create cookie map: %w", err)
	}
	if m.ring, err = ebpf.NewMap(&ebpf.MapSpec{Name: "router_events", Type: ebpf.RingBuf, MaxEntries: 64 << 10}); err != nil {
		return nil, fmt.Errorf("sockmap: create ring buffer: %w", err)
	}
	insns := program(maps{socks: m.socks.FD(), state: m.state.FD(), cookie: m.cookie.FD(), ring: m.ring.FD()}, seqOff, cfg.Budget)
	m.prog, err = ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name: "router_verdict", Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBStreamVerdict,
		Instructions: insns, License: "Dual MIT/GPL",
	}, ebpf.ProgramOptions{})
	if err != nil {
		return nil, fmt.Errorf("sockmap: load program: %w", err)
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: m.socks.FD(), Program: m.prog, Attach: ebpf.AttachSkSKBStreamVerdict}); err != nil {
		return nil, fmt.Errorf("sockmap: attach program: %w", err)
	}
	size := int(slots) * stateSize
	size = (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	if m.mem, err = unix.Mmap(m.state.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("sockmap: map the counters: %w", err)
	}
	if m.events, err = ringbuf.NewReader(m.ring); err != nil {
		return nil, fmt.Errorf("sockmap: read the ring buffer: %w", err)
	}
	return m, nil
}

// writeSeqOffset finds where struct tcp_sock keeps write_seq in this kernel (its BTF), for
// the program's one read of the peer socket (CO-RE by hand: the program is built here, not
// by a compiler). The parsed BTF is garbage once Load returns.
func writeSeqOffset() (uint32, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("sockmap: kernel BTF: %w", err)
	}
	var ts *btf.Struct
	if err := spec.TypeByName("tcp_sock", &ts); err != nil {
		return 0, fmt.Errorf("sockmap: kernel BTF: %w", err)
	}
	off, ok := memberOffset(ts.Members, "write_seq", 0)
	if !ok {
		return 0, errors.New("sockmap: kernel BTF: struct tcp_sock has no write_seq")
	}
	return off, nil
}

// memberOffset finds name among members, looking into anonymous structs and unions, and
// returns its byte offset from base.
func memberOffset(members []btf.Member, name string, base uint32) (uint32, bool) {
	for _, mb := range members {
		off := base + mb.Offset.Bytes()
		if mb.Name == name {
			return off, true
		}
		if mb.Name != "" {
			continue
		}
		switch t := btf.UnderlyingType(mb.Type).(type) {
		case *btf.Struct:
			if o, ok := memberOffset(t.Members, name, off); ok {
				return o, true
			}
		case *btf.Union:
			if o, ok := memberOffset(t.Members, name, off); ok {
				return o, true
			}
		}
	}
	return 0, false
}

// Close detaches the program (closing its maps ends every redirect) and unblocks Event.
// Flows still in the map keep their sockets; the caller closes them.
func (m *Map) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	var errs []error
	if m.events != nil {
		errs = append(errs, m.events.Close())
	}
	if m.mem != nil {
		errs = append(errs, unix.Munmap(m.mem))
	}
	for _, c := range []interface{ Close() error }{m.prog, m.socks, m.state, m.cookie, m.ring} {
		if c != nil && !isNilCloser(c) {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *ebpf.Program:
		return v == nil
	case *ebpf.Map:
		return v == nil
	}
	return false
}

// Pairs is the number of flows the map can hold at once.
func (m *Map) Pairs() int { return m.pairs }

// Flow is one flow in the map: sockets fd[0] and fd[1] in slots 2·pair and 2·pair+1. Side s
// is the direction whose source is fd[s].
type Flow struct {
	m    *Map
	pair int
	fd   [2]int
	// base[s] is what fd[s] had been given to send when the flow was added (Written).
	base   [2]uint64
	cookie [2]uint64
}

// Add puts the connected TCP sockets a and b in the map as pair, so that what one receives
// is sent by the other, and returns the flow. The caller must have written everything it
// read from either socket, and must write nothing more to a side until the program passes
// its direction (see Passing). Bytes a or b hold unread are redirected (or passed) when the
// program next runs on the socket: Kick runs it. The caller must not have read part of a
// segment: the program takes whole segments off the receive queue, and would send the
// part again (a read that ended with EAGAIN leaves none). The caller keeps a and b and
// closes them when the flow ends (which takes them out of the map); Release then forgets
// the flow.
func (m *Map) Add(pair int, a, b int) (*Flow, error) {
	if pair < 0 || pair >= m.pairs {
		return nil, fmt.Errorf("sockmap: pair %d out of range", pair)
	}
	f := &Flow{m: m, pair: pair, fd: [2]int{a, b}}
	for s, fd := range f.fd {
		c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		if err != nil {
			return nil, fmt.Errorf("sockmap: socket cookie: %w", err)
		}
		f.cookie[s] = c
		w, err := Written(fd)
		if err != nil {
			return nil, err
		}
		f.base[s] = w
		clear(m.slot(f.slot(s)))
	}
	for s := range f.fd {
		if err := m.cookie.Update(f.cookie[s], f.slot(s), ebpf.UpdateAny); err != nil {
			f.Release()
			return nil, fmt.Errorf("sockmap: add cookie: %w", err)
		}
	}
	for s, fd := range f.fd {
		if err := m.socks.Update(f.slot(s), uint32(fd), ebpf.UpdateAny); err != nil {
			if s == 1 {
				// The first socket is in: only closing it takes it out without risk
				// (nothing was redirected yet, but the caller relays it differently).
				m.socks.Delete(f.slot(0))
			}
			f.Release()
			return nil, fmt.Errorf("sockmap: add socket: %w", err)
		}
	}
	return f, nil
}

func (f *Flow) slot(side int) uint32 { return uint32(2*f.pair + side) }

// slot returns the shared state of slot i.
func (m *Map) slot(i uint32) []byte { return m.mem[i*stateSize : (i+1)*stateSize] }

func (m *Map) u64(i uint32, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&m.mem[int(i)*stateSize+off]))
}

func (m *Map) u32(i uint32, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&m.mem[int(i)*stateSize+off]))
}

// Release forgets the flow; call it after both sockets are closed (closing takes them out
// of the socket map). The pair may then be given to another flow.
func (f *Flow) Release() {
	for s := range f.cookie {
		if f.cookie[s] != 0 {
			f.m.cookie.Delete(f.cookie[s])
		}
	}
}

// Pair is the flow's pair.
func (f *Flow) Pair() int { return f.pair }

// Redirected is how many bytes fd[side] received that the program redirected to the other
// socket so far (an atomic read of the shared counter: no system call).
func (f *Flow) Redirected(side int) uint64 { return f.m.u64(f.slot(side), offRedirected).Load() }

// Passed is how many bytes fd[side] received that the program passed to fd[side]'s own
// receive queue, for the caller to read.
func (f *Flow) Passed(side int) uint64 { return f.m.u64(f.slot(side), offPassed).Load() }

// Passing reports whether the program passes what fd[side] receives to fd[side]'s receive
// queue instead of redirecting it: the caller copies that direction (after Drained) until
// the program redirects again, which it does on the next segment once the caller sent
// every passed byte (SetSent reaches Passed).
func (f *Flow) Passing(side int) bool { return f.m.u32(f.slot(side), offPassing).Load() != 0 }

// Trips counts the times the program stopped redirecting what fd[side] receives: a change
// means the caller must wait for Drained again before it copies more.
func (f *Flow) Trips(side int) uint32 { return f.m.u32(f.slot(side), offTrips).Load() }

// SetSent tells the program how many bytes the caller wrote to fd[1-side] since Add (all of
// them passed bytes of this direction, in order): when it reaches Passed, the program
// redirects again.
func (f *Flow) SetSent(side int, n uint64) { f.m.u64(f.slot(side), offSent).Store(n) }

// Drained reports whether the other socket, fd[1-side], has taken into its send queue every
// byte redirected from fd[side] plus the sent bytes the caller wrote to it since Add: its
// psock holds nothing of this direction any more. It costs three system calls.
func (f *Flow) Drained(side int, sent uint64) (bool, error) {
	w, err := Written(f.fd[1-side])
	if err != nil {
		return false, err
	}
	return w == f.base[1-side]+f.Redirected(side)+sent, nil
}

// Taken is how many bytes the other socket, fd[1-side], was given to send since Add: the
// redirected ones it took from its psock and the caller's (0 when it cannot be read).
func (f *Flow) Taken(side int) uint64 {
	w, err := Written(f.fd[1-side])
	if err != nil {
		return 0
	}
	return w - f.base[1-side]
}

// Event waits for the next direction to stop redirecting and returns its pair and side. It
// returns an error once the Map is closed.
func (m *Map) Event() (pair, side int, err error) {
	for {
		rec, err := m.events.Read()
		if err != nil {
			return 0, 0, fmt.Errorf("sockmap: events: %w", err)
		}
		if len(rec.RawSample) < 4 {
			continue
		}
		slot := binary.NativeEndian.Uint32(rec.RawSample)
		return int(slot / 2), int(slot % 2), nil
	}
}

// Written returns how many bytes the socket fd was given to send since it connected (the
// acknowledged ones and those still in its send queue): TCP_INFO's bytes_acked plus
// SIOCOUTQ, read until two reads of bytes_acked around SIOCOUTQ agree, so that an
// acknowledgement arriving between the calls is not counted twice or missed.
func Written(fd int) (uint64, error) {
	for range 64 {
		a, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0, fmt.Errorf("sockmap: tcp info: %w", err)
		}
		q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
		if err != nil {
			return 0, fmt.Errorf("sockmap: send queue: %w", err)
		}
		b, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0, fmt.Errorf("sockmap: tcp info: %w", err)
		}
		if a.Bytes_acked == b.Bytes_acked {
			return a.Bytes_acked + uint64(q), nil
		}
	}
	return 0, errors.New("sockmap: send queue kept moving")
}

// Kick runs the program on what fd received before it entered the map (a receive with
// MSG_PEEK does that) and reports whether passed bytes wait to be read.
func Kick(fd int) (bool, error) {
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false, nil
		case err != nil:
			return false, fmt.Errorf("sockmap: kick: %w", err)
		}
		return n > 0, nil
	}
}
