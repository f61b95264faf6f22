package cagemark

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Config is what Install puts in place.
type Config struct {
	// Names are the file names of the executables whose processes' sockets are marked, and
	// those of their descendants (see the package doc): exact, or a prefix with a trailing
	// '*'. Names with other wildcards, or paths, are skipped (see Keys). No name
	// at all: Install removes the program of the namespace.
	Names []string
	// Mark is the socket mark put on the sockets of Names. Required (not 0).
	Mark uint32
	// NetNS is an open file descriptor of the network namespace whose sockets are marked; 0
	// means the caller's. The caller keeps ownership of it.
	NetNS int
}

// Names of the maps, which every program of a namespace shares: how Install finds them.
const (
	progPrefix = "router_cage"
	configName = "cage_config"
	namesName  = "cage_names"
	procsName  = "cage_procs"
	maxProcs   = 4096
	maxNames   = 256
	configSize = 16 // u64 cookie, u32 mark, u32 padding
	keySize    = 4 + nameLen
	// soNetnsCookie is SO_NETNS_COOKIE (include/uapi/asm-generic/socket.h).
	soNetnsCookie = 71
)

// Keys returns the names trie's keys for names, and the names that cannot be told in the
// kernel (a path, a wildcard other than a trailing '*').
func Keys(names []string) (keys [][]byte, skipped []string) {
	seen := map[string]bool{}
	for _, n := range names {
		k, ok := key(n)
		if !ok {
			skipped = append(skipped, n)
			continue
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	return keys, skipped
}

// key encodes one name as an LPM trie key: the prefix length in bits, then the bytes of
// the executable's name that must match (an exact name ends with its NUL; the program
// reads at most nameLen-1 bytes of a name).
func key(name string) ([]byte, bool) {
	base, prefix, ok := rule(name)
	if !ok {
		return nil, false
	}
	data := []byte(base)
	if !prefix {
		data = append(data, 0)
	}
	k := binary.NativeEndian.AppendUint32(nil, uint32(len(data)*8))
	k = append(k, data...)
	return append(k, make([]byte, keySize-len(k))...), true
}

// Install marks the sockets of cfg.Names created or connected in cfg.NetNS from now on,
// until Remove: it updates the programs already attached for that namespace, and loads and
// attaches those missing.
func Install(cfg Config) error {
	keys, _ := Keys(cfg.Names)
	if len(keys) == 0 {
		return Remove(cfg.NetNS)
	}
	if cfg.Mark == 0 {
		return errors.New("cagemark install: mark 0")
	}
	if len(keys) > maxNames {
		return fmt.Errorf("cagemark install: %d names, at most %d", len(keys), maxNames)
	}
	a, err := lookup(cfg.NetNS)
	if err != nil {
		return fmt.Errorf("cagemark install: %w", err)
	}
	defer a.close()
	// The maps of the first program found serve every hook; a program with maps of its
	// own (two installs that raced), or a second one on a hook, goes.
	var m *prog
	have := map[ebpf.AttachType]bool{}
	for _, p := range a.progs {
		switch {
		case p.stale:
			if err := detach(a.cg, p); err != nil {
				return fmt.Errorf("cagemark install: %w", err)
			}
			continue
		case m == nil:
			m = p
		case p.configID != m.configID || have[p.hook.attach]:
			if err := detach(a.cg, p); err != nil {
				return fmt.Errorf("cagemark install: %w", err)
			}
			continue
		}
		have[p.hook.attach] = true
	}
	if m == nil {
		if m, err = newMaps(); err != nil {
			return fmt.Errorf("cagemark install: %w", err)
		}
		defer m.close()
	}
	if err := fill(m, config(a.cookie, cfg.Mark), keys); err != nil {
		return fmt.Errorf("cagemark install: %w", err)
	}
	var l layout
	if len(have) < len(hooks) {
		if l, err = kernelLayout(nil); err != nil {
			return fmt.Errorf("cagemark install: %w", err)
		}
	}
	for _, h := range hooks {
		if have[h.attach] {
			continue
		}
		err := attach(a.cg, h, l, m)
		if errors.Is(err, unix.E2BIG) {
			// The cgroup holds 64 programs a hook: room is made by detaching those left
			// for namespaces that are gone, and never one of a namespace that lives.
			if gerr := collectGone(a.cg); gerr != nil {
				return fmt.Errorf("cagemark install: %w (%w)", err, gerr)
			}
			err = attach(a.cg, h, l, m)
		}
		if err != nil {
			return fmt.Errorf("cagemark install: %w", err)
		}
	}
	return nil
}

// Remove detaches the programs of the namespace netNS (0: the caller's); none attached is
// not an error.
func Remove(netNS int) error {
	a, err := lookup(netNS)
	if err != nil {
		return fmt.Errorf("cagemark remove: %w", err)
	}
	defer a.close()
	for _, p := range a.progs {
		if err := detach(a.cg, p); err != nil {
			return fmt.Errorf("cagemark remove: %w", err)
		}
	}
	return nil
}

// Installed returns the names and the mark of the programs attached for netNS, or false
// when not every hook has one.
func Installed(netNS int) (names []string, mark uint32, ok bool, err error) {
	a, err := lookup(netNS)
	if err != nil {
		return nil, 0, false, fmt.Errorf("cagemark installed: %w", err)
	}
	defer a.close()
	have := map[ebpf.AttachType]bool{}
	for _, p := range a.progs {
		if p.stale {
			return nil, 0, false, nil
		}
		have[p.hook.attach] = true
	}
	if len(have) != len(hooks) {
		return nil, 0, false, nil
	}
	var k []byte
	it := a.progs[0].names.Iterate()
	var v uint8
	for it.Next(&k, &v) {
		n := binary.NativeEndian.Uint32(k) / 8
		s := string(k[4 : 4+n])
		if exact, whole := strings.CutSuffix(s, "\x00"); whole {
			s = exact
		} else {
			s += "*"
		}
		names = append(names, s)
	}
	if err := it.Err(); err != nil {
		return nil, 0, false, fmt.Errorf("cagemark installed: names: %w", err)
	}
	return names, a.progs[0].mark, true, nil
}

// Once returns the thread group IDs of the processes the programs attached for netNS (0:
// the caller's) remember having caged (see the package doc); none when none is attached.
func Once(netNS int) (map[int]bool, error) {
	a, err := lookup(netNS)
	if err != nil {
		return nil, fmt.Errorf("cagemark once: %w", err)
	}
	defer a.close()
	out := map[int]bool{}
	for _, p := range a.progs {
		if p.stale || p.procs == nil {
			continue
		}
		var k, v []byte
		it := p.procs.Iterate()
		for it.Next(&k, &v) {
			if len(k) >= 4 {
				out[int(binary.NativeEndian.Uint32(k))] = true
			}
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("cagemark once: %w", err)
		}
		break // the programs of one namespace share the map
	}
	return out, nil
}

// prog is one attached program (prog, hook) with its maps, or the maps alone.
type prog struct {
	prog          *ebpf.Program
	hook          hook
	config, names *ebpf.Map
	procs         *ebpf.Map // the processes caged once, by (tgid, start time)
	configID      ebpf.MapID
	mark          uint32 // the mark its config holds (attached)
	cookie        uint64 // the namespace's cookie its config holds (attached)
	// stale: a program of an older version of this package (its names map has another
	// key), which Install replaces.
	stale bool
}

func (p *prog) close() {
	if p.prog != nil {
		p.prog.Close()
	}
	for _, m := range []*ebpf.Map{p.config, p.names, p.procs} {
		if m != nil {
			m.Close()
		}
	}
}

type progs []*prog

func (ps progs) close() {
	for _, p := range ps {
		p.close()
	}
}

func config(cookie uint64, mark uint32) []byte {
	b := binary.NativeEndian.AppendUint64(nil, cookie)
	b = binary.NativeEndian.AppendUint32(b, mark)
	return append(b, 0, 0, 0, 0)
}

// newMaps creates the config and names maps.
func newMaps() (_ *prog, err error) {
	p := &prog{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.config, err = ebpf.NewMap(&ebpf.MapSpec{Name: configName, Type: ebpf.Array, KeySize: 4, ValueSize: configSize, MaxEntries: 1}); err != nil {
		return nil, fmt.Errorf("config map: %w", err)
	}
	if p.names, err = ebpf.NewMap(&ebpf.MapSpec{Name: namesName, Type: ebpf.LPMTrie, KeySize: keySize, ValueSize: 1,
		MaxEntries: maxNames, Flags: unix.BPF_F_NO_PREALLOC}); err != nil {
		return nil, fmt.Errorf("names map: %w", err)
	}
	if p.procs, err = ebpf.NewMap(&ebpf.MapSpec{Name: procsName, Type: ebpf.LRUHash, KeySize: 16, ValueSize: 1,
		MaxEntries: maxProcs}); err != nil {
		return nil, fmt.Errorf("procs map: %w", err)
	}
	return p, nil
}

// attach loads the program of h over the maps of m and attaches it to the cgroup cg; the
// attachment holds it.
func attach(cg int, h hook, l layout, m *prog) error {
	pr, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name: h.name, Type: h.typ, AttachType: h.attach,
		Instructions: program(h, l, m.config.FD(), m.names.FD(), m.procs.FD()), License: "Dual MIT/GPL",
	}, ebpf.ProgramOptions{})
	if err != nil {
		return fmt.Errorf("load program %s: %w", h.name, err)
	}
	defer pr.Close()
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: cg, Program: pr, Attach: h.attach, Flags: unix.BPF_F_ALLOW_MULTI,
	}); err != nil {
		return fmt.Errorf("attach %s to the cgroup root: %w", h.name, err)
	}
	return nil
}

// fill writes conf and makes the names trie hold exactly keys: the new ones first, then
// the stale ones deleted, so that a name kept across a reload is never missing.
func fill(p *prog, conf []byte, keys [][]byte) error {
	for _, k := range keys {
		if err := p.names.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("names map: %w", err)
		}
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[string(k)] = true
	}
	var stale [][]byte
	var k []byte
	var v uint8
	it := p.names.Iterate()
	for it.Next(&k, &v) {
		if !want[string(k)] {
			stale = append(stale, append([]byte(nil), k...))
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("names map: %w", err)
	}
	for _, k := range stale {
		if err := p.names.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("names map: %w", err)
		}
	}
	if len(stale) > 0 && p.procs != nil {
		// A name no longer caged: the processes caged once are judged again.
		if err := clearMap(p.procs); err != nil {
			return fmt.Errorf("procs map: %w", err)
		}
	}
	if err := p.config.Put(uint32(0), conf); err != nil {
		return fmt.Errorf("config map: %w", err)
	}
	return nil
}

// clearMap deletes every key of m.
func clearMap(m *ebpf.Map) error {
	var keys [][]byte
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, append([]byte(nil), k...))
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// attachment is what this package has attached for one network namespace.
type attachment struct {
	cookie uint64 // the namespace's
	cg     int    // the cgroup root, open
	progs  progs  // the programs attached to cg for the namespace, on every hook
}

// lookup opens the cgroup root and finds the programs attached for the namespace netNS (0:
// the caller's). The caller closes the attachment.
func lookup(netNS int) (*attachment, error) {
	cookie, err := netnsCookie(netNS)
	if err != nil {
		return nil, err
	}
	cg, err := openCgroupRoot()
	if err != nil {
		return nil, err
	}
	found, err := attached(cg, cookie)
	if err != nil {
		unix.Close(cg)
		return nil, err
	}
	return &attachment{cookie: cookie, cg: cg, progs: found}, nil
}

// close closes the programs and the cgroup root.
func (a *attachment) close() {
	a.progs.close()
	unix.Close(a.cg)
}

// attached returns the programs of this package attached to the cgroup cg, on every hook,
// for the namespace cookie.
func attached(cg int, cookie uint64) (progs, error) {
	return attachedIf(cg, func(c uint64) bool { return c == cookie })
}

// attachedIf returns the programs of this package attached to the cgroup cg, on every hook,
// for the namespaces whose cookie serve says.
func attachedIf(cg int, serve func(cookie uint64) bool) (progs, error) {
	var out progs
	for _, h := range hooks {
		res, err := link.QueryPrograms(link.QueryOptions{Target: cg, Attach: h.attach})
		if err != nil {
			out.close()
			return nil, fmt.Errorf("query the cgroup root's programs: %w", err)
		}
		for _, ap := range res.Programs {
			p, err := open(ap.ID, h, serve)
			if err != nil {
				out.close()
				return nil, err
			}
			if p != nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// open returns the program id of hook h with its maps when it is ours and serves a
// namespace whose cookie serve says, else nil.
func open(id ebpf.ProgramID, h hook, serve func(cookie uint64) bool) (*prog, error) {
	pr, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // detached meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("program %d: %w", id, err)
	}
	p := &prog{prog: pr, hook: h}
	info, err := pr.Info()
	if err != nil || !strings.HasPrefix(info.Name, progPrefix) {
		p.close()
		if err != nil {
			return nil, fmt.Errorf("program %d: %w", id, err)
		}
		return nil, nil
	}
	ids, _ := info.MapIDs()
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("program %d: map %d: %w", id, mid, err)
		}
		mi, err := m.Info()
		switch {
		case err != nil:
			m.Close()
			p.close()
			return nil, fmt.Errorf("program %d: map %d: %w", id, mid, err)
		case mi.Name == configName && p.config == nil:
			p.config, p.configID = m, mid
		case mi.Name == namesName && p.names == nil:
			p.names = m
		case mi.Name == procsName && p.procs == nil:
			p.procs = m
		default:
			m.Close()
		}
	}
	if p.config == nil || p.names == nil {
		p.close()
		return nil, nil
	}
	var conf []byte
	if err := p.config.Lookup(uint32(0), &conf); err != nil || len(conf) < configSize ||
		!serve(binary.NativeEndian.Uint64(conf[offCookie:])) {
		p.close()
		return nil, nil
	}
	p.cookie = binary.NativeEndian.Uint64(conf[offCookie:])
	p.mark = binary.NativeEndian.Uint32(conf[offMark:])
	if mi, err := p.names.Info(); err != nil || mi.KeySize != keySize || p.procs == nil {
		p.stale = true
	}
	return p, nil
}

// detach detaches p from the cgroup cg; one detached meanwhile (by another router's
// install making room) is not an error.
func detach(cg int, p *prog) error {
	err := link.RawDetachProgram(link.RawDetachProgramOptions{Target: cg, Program: p.prog, Attach: p.hook.attach})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("detach %s from the cgroup root: %w", p.hook.name, err)
	}
	return nil
}

// netnsCookie returns the cookie of the network namespace fd (0: the caller's), which
// bpf_get_netns_cookie gives the program for a socket created there. It asks a Unix socket
// (SO_NETNS_COOKIE is a socket-level option, the same for every family), a family the boot
// guard's unit allows (router-guard.service: RestrictAddressFamilies=AF_UNIX AF_NETLINK).
func netnsCookie(fd int) (uint64, error) {
	get := func() (uint64, error) {
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("network namespace cookie: socket: %w", err)
		}
		defer unix.Close(s)
		c, err := unix.GetsockoptUint64(s, unix.SOL_SOCKET, soNetnsCookie)
		if err != nil {
			return 0, fmt.Errorf("network namespace cookie: %w", err)
		}
		return c, nil
	}
	if fd == 0 {
		return get()
	}
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return 0, fmt.Errorf("network namespace cookie: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return 0, fmt.Errorf("network namespace cookie: setns: %w", err)
	}
	c, gerr := get()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, in the other namespace: it ends with this goroutine.
		return 0, fmt.Errorf("network namespace cookie: setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return c, gerr
}

// openCgroupRoot opens the cgroup v2 hierarchy's root directory: where it is mounted, or
// (inside `ip netns exec`, which mounts a sysfs of its own over /sys) a mount of its own,
// taken away again at once (the descriptor stays valid).
func openCgroupRoot() (int, error) {
	if dir := cgroup2Mount(); dir != "" {
		if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			return fd, nil
		}
	}
	dir, err := os.MkdirTemp("", "router-cgroup-")
	if err != nil {
		return -1, fmt.Errorf("cgroup2 mount point: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return -1, fmt.Errorf("mount cgroup2: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the cgroup2 root: %w", err)
	}
	return fd, nil
}

// cgroup2Mount returns where this mount namespace has the whole cgroup v2 hierarchy
// mounted, or "" (/proc/self/mountinfo: root, mount point, and the type after " - ").
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, typ := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(typ) >= 1 && typ[0] == "cgroup2" && fields[3] == "/" {
			return fields[4]
		}
	}
	return ""
}
