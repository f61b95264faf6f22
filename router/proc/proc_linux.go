package proc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/rules"
)

// LinuxFinder finds the process that owns a local TCP socket from the socket's addresses:
// netlink sock_diag (NETLINK_INET_DIAG, inet_diag_req_v2 with the exact 4-tuple) gives the
// socket's inode, and the /proc/PID/fd links give the PID that holds socket:[inode].
//
// Scanning /proc is the expensive part, so a LinuxFinder remembers, per socket inode, the
// PID and fd that held it (checked with one readlink on every hit), and the PIDs that owned
// recent sockets: on a miss it scans those PIDs first (the hypervisor process opens most
// connections), then all of /proc, rebuilding the cache from what it sees. The cache is
// bounded (LinuxFinderConfig.MaxCache entries); a full scan replaces it, so sockets that are
// gone drop out. A cache hit costs one sock_diag round trip and two readlinks; a miss
// costs one readlink per descriptor of the processes scanned (every process on a full
// scan), so it grows with the owner's descriptor count.
//
// A LinuxFinder is safe for concurrent use; mu guards the cache and serialises scans (a
// lookup that waited for another's scan usually finds its answer in the fresh cache). It
// holds no descriptors between calls, so it needs no Close. Lookups see the network
// namespace of the calling thread and the /proc under ProcRoot.
type LinuxFinder struct {
	procRoot string
	maxCache int
	log      *slog.Logger

	mu     sync.Mutex
	cache  map[uint32]fdRef // socket inode -> holder; guarded by mu
	recent []int            // PIDs of recent owners, most recent first; guarded by mu
}

// LinuxFinderConfig configures NewLinuxFinder; the zero value is the default.
type LinuxFinderConfig struct {
	// ProcRoot is where procfs is mounted; "" means /proc.
	ProcRoot string
	// MaxCache bounds the inode cache; 0 means 65536 entries.
	MaxCache int
	// Logger receives debug records of scans; nil means discard.
	Logger *slog.Logger
}

// fdRef is where a socket inode was seen: /proc/<pid>/fd/<fd>.
type fdRef struct{ pid, fd int32 }

const (
	defaultMaxCache = 1 << 16
	recentPIDs      = 8
)

// NewLinuxFinder returns a LinuxFinder with an empty cache.
func NewLinuxFinder(cfg LinuxFinderConfig) *LinuxFinder {
	f := &LinuxFinder{procRoot: cfg.ProcRoot, maxCache: cfg.MaxCache, log: cfg.Logger}
	if f.procRoot == "" {
		f.procRoot = "/proc"
	}
	if f.maxCache <= 0 {
		f.maxCache = defaultMaxCache
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.cache = make(map[uint32]fdRef)
	return f
}

// LookupTCP returns the process owning the TCP socket whose own address is local and whose
// peer is remote, both as that socket sees them. For a connection the router accepted from
// a local redirect, local is the accepted connection's remote address and remote the
// original destination. IPv4-mapped addresses are treated as IPv4. When no socket or no
// process holds that 4-tuple (a forwarded VM flow, a socket already closed, an owner that
// exited) the error wraps fs.ErrNotExist.
func (f *LinuxFinder) LookupTCP(local, remote netip.AddrPort) (rules.Owner, error) {
	return f.lookup(unix.IPPROTO_TCP, local, remote)
}

// LookupUDP returns the process owning the UDP socket that sent a datagram from local to
// remote: the socket the kernel would deliver an answer from remote to, connected or not
// (bound to local's port, on local's address or on any). The error wraps fs.ErrNotExist when
// no socket or process holds it (the socket was closed after sending).
func (f *LinuxFinder) LookupUDP(local, remote netip.AddrPort) (rules.Owner, error) {
	return f.lookup(unix.IPPROTO_UDP, local, remote)
}

func (f *LinuxFinder) lookup(proto byte, local, remote netip.AddrPort) (rules.Owner, error) {
	name := "tcp"
	if proto == unix.IPPROTO_UDP {
		name = "udp"
	}
	inode, _, err := diag(proto, local, remote)
	if err != nil {
		return rules.Owner{}, fmt.Errorf("proc lookup %s %v -> %v: %w", name, local, remote, err)
	}
	pid, err := f.pidOf(inode)
	if err != nil {
		return rules.Owner{}, fmt.Errorf("proc lookup %s %v -> %v: %w", name, local, remote, err)
	}
	info, err := f.info(pid)
	if err != nil {
		return rules.Owner{}, fmt.Errorf("proc lookup %s %v -> %v: %w", name, local, remote, err)
	}
	return info, nil
}

// info describes pid: AppPath from /proc/PID/exe, App its base name, or /proc/PID/comm when
// the link cannot be read (kernel threads, some zombies, which cannot rename themselves).
// The name a process gives itself is not in it: Comm is for a process list (see Processes).
func (f *LinuxFinder) info(pid int) (rules.Owner, error) {
	dir := filepath.Join(f.procRoot, strconv.Itoa(pid))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		exe = strings.TrimSuffix(exe, " (deleted)")
		return rules.Owner{PID: pid, App: filepath.Base(exe), AppPath: exe}, nil
	}
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return rules.Owner{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return rules.Owner{PID: pid, App: strings.TrimSuffix(string(comm), "\n")}, nil
}

// pidOf returns the PID holding socket inode: the cache, then recent owners, then all of
// /proc.
func (f *LinuxFinder) pidOf(inode uint32) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ref, ok := f.cache[inode]; ok {
		if f.holds(ref, inode) {
			f.touch(int(ref.pid))
			return int(ref.pid), nil
		}
		delete(f.cache, inode)
	}
	if len(f.cache) >= f.maxCache {
		clear(f.cache)
	}
	for _, pid := range f.recent {
		if ref, ok := f.scanPID(pid, inode, f.cache); ok {
			f.touch(int(ref.pid))
			return int(ref.pid), nil
		}
	}
	fresh := make(map[uint32]fdRef, len(f.cache))
	ref, found, err := f.scanAll(inode, fresh)
	if err != nil {
		return 0, err
	}
	f.cache = fresh
	f.log.Debug("proc: scanned /proc", "sockets", len(fresh), "found", found)
	if !found {
		return 0, fmt.Errorf("no process holds socket inode %d: %w", inode, fs.ErrNotExist)
	}
	f.touch(int(ref.pid))
	return int(ref.pid), nil
}

// touch moves pid to the front of the recent owners.
func (f *LinuxFinder) touch(pid int) {
	if i := indexOf(f.recent, pid); i >= 0 {
		copy(f.recent[1:i+1], f.recent[:i])
		f.recent[0] = pid
		return
	}
	if len(f.recent) < recentPIDs {
		f.recent = append(f.recent, 0)
	}
	copy(f.recent[1:], f.recent)
	f.recent[0] = pid
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// holds reports whether /proc/<pid>/fd/<fd> still links to socket:[inode].
func (f *LinuxFinder) holds(ref fdRef, inode uint32) bool {
	var buf [64]byte
	n, err := unix.Readlink(filepath.Join(f.procRoot, strconv.Itoa(int(ref.pid)), "fd", strconv.Itoa(int(ref.fd))), buf[:])
	if err != nil {
		return false
	}
	got, ok := parseSocketLink(buf[:n])
	return ok && got == inode
}

// scanAll scans every process, recording socket inodes into cache (up to maxCache
// entries) and reporting where want was seen.
func (f *LinuxFinder) scanAll(want uint32, cache map[uint32]fdRef) (fdRef, bool, error) {
	names, err := readDirNames(f.procRoot)
	if err != nil {
		return fdRef{}, false, fmt.Errorf("scan %s: %w", f.procRoot, err)
	}
	var hit fdRef
	found := false
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if ref, ok := f.scanPID(pid, want, cache); ok && !found {
			hit, found = ref, true
		}
	}
	return hit, found, nil
}

// scanPID reads the fd links of pid, records sockets into cache while it has room, and
// reports where want was seen. Processes that vanish or deny access are skipped.
func (f *LinuxFinder) scanPID(pid int, want uint32, cache map[uint32]fdRef) (fdRef, bool) {
	dir := filepath.Join(f.procRoot, strconv.Itoa(pid), "fd")
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fdRef{}, false
	}
	defer unix.Close(dfd)
	var (
		hit   fdRef
		found bool
		names []string
		dbuf  [8192]byte
		lbuf  [64]byte
	)
	for {
		n, err := unix.ReadDirent(dfd, dbuf[:])
		if err != nil || n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(dbuf[:n], -1, names[:0])
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err != nil {
				continue
			}
			m, err := unix.Readlinkat(dfd, name, lbuf[:])
			if err != nil {
				continue
			}
			inode, ok := parseSocketLink(lbuf[:m])
			if !ok {
				continue
			}
			ref := fdRef{pid: int32(pid), fd: int32(fd)}
			if len(cache) < f.maxCache {
				cache[inode] = ref
			}
			if inode == want && !found {
				hit, found = ref, true
			}
		}
	}
	return hit, found
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// parseSocketLink returns the inode of an fd link of the form "socket:[12345]".
func parseSocketLink(b []byte) (uint32, bool) {
	const prefix = "socket:["
	if !bytes.HasPrefix(b, []byte(prefix)) || len(b) < len(prefix)+2 || b[len(b)-1] != ']' {
		return 0, false
	}
	digits := b[len(prefix) : len(b)-1]
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v > 1<<32-1 {
			return 0, false
		}
	}
	return uint32(v), true
}

// sock_diag wire format (include/uapi/linux/inet_diag.h, sock_diag.h).
const (
	sizeofInetDiagReqV2 = 56 // family, protocol, ext, pad, states, inet_diag_sockid
	sizeofInetDiagMsg   = 72 // family, state, timer, retrans, sockid, expires, rqueue, wqueue, uid, inode
	inetDiagNoCookie    = 0xffffffff
	diagSeq             = 1
)

// diagTCP asks the kernel, for the calling thread's network namespace, which TCP socket
// has exactly this 4-tuple; it returns its inode and owner uid.
func diagTCP(local, remote netip.AddrPort) (inode, uid uint32, err error) {
	return diag(unix.IPPROTO_TCP, local, remote)
}

// diag asks the kernel which socket of proto (TCP: exactly this 4-tuple; UDP: the one that
// would receive a datagram from remote to local) it is; it returns its inode and owner uid.
func diag(proto byte, local, remote netip.AddrPort) (inode, uid uint32, err error) {
	var buf [1024]byte
	b, err := diagExchange(proto, local, remote, buf[:])
	if err != nil {
		return 0, 0, err
	}
	return parseDiagReply(b, diagSeq)
}

// diagExchange sends the exact sock_diag lookup of diag and returns the kernel's reply, read
// into buf.
func diagExchange(proto byte, local, remote netip.AddrPort, buf []byte) ([]byte, error) {
	req, err := diagRequest(local, remote)
	if err != nil {
		return nil, err
	}
	if proto == unix.IPPROTO_UDP {
		// udp_dump_one looks the socket up as for a datagram arriving from idiag_src to
		// idiag_dst (net/ipv4/udp_diag.c): the peer goes first.
		req, err = diagRequest(remote, local)
		if err != nil {
			return nil, err
		}
		req[unix.NLMSG_HDRLEN+1] = unix.IPPROTO_UDP
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers an exact lookup while handling the send; the timeout only guards
	// against a reply that never comes.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("sock_diag timeout: %w", err)
	}
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag send: %w", err)
	}
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return nil, fmt.Errorf("sock_diag receive: %w", err)
	}
	return buf[:n], nil
}

// Mark returns the mark (SO_MARK) of the socket LookupTCP (proto TCP) or LookupUDP (UDP)
// would find: what the kernel put on it, the cage's mark included. The error wraps
// fs.ErrNotExist when there is no such socket. Reading a mark needs CAP_NET_ADMIN.
func (f *LinuxFinder) Mark(proto byte, local, remote netip.AddrPort) (uint32, error) {
	var buf [1024]byte
	b, err := diagExchange(proto, local, remote, buf[:])
	if err != nil {
		return 0, fmt.Errorf("socket mark %v -> %v: %w", local, remote, err)
	}
	m, err := parseDiagMark(b, diagSeq)
	if err != nil {
		return 0, fmt.Errorf("socket mark %v -> %v: %w", local, remote, err)
	}
	return m, nil
}

// diagRequest builds the netlink message for an exact sock_diag lookup of a TCP socket.
func diagRequest(local, remote netip.AddrPort) ([]byte, error) {
	la, ra := local.Addr().Unmap(), remote.Addr().Unmap()
	if !la.IsValid() || !ra.IsValid() || la.Is4() != ra.Is4() {
		return nil, fmt.Errorf("sock_diag: addresses %v and %v are not one family", local, remote)
	}
	family := byte(unix.AF_INET)
	if la.Is6() {
		family = unix.AF_INET6
	}
	b := make([]byte, unix.NLMSG_HDRLEN+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST) // no NLM_F_DUMP: one exact socket
	ne.PutUint32(b[8:], diagSeq)
	r := b[unix.NLMSG_HDRLEN:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xffffffff) // all states
	id := r[8:]                     // struct inet_diag_sockid
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	copy(id[4:20], la.AsSlice())
	copy(id[20:36], ra.AsSlice())
	ne.PutUint32(id[36:], 0) // any interface
	ne.PutUint32(id[40:], inetDiagNoCookie)
	ne.PutUint32(id[44:], inetDiagNoCookie)
	return b, nil
}

// parseDiagReply reads the kernel's answer to diagRequest: an inet_diag_msg, or an
// NLMSG_ERROR (ENOENT: no such socket, wrapped as fs.ErrNotExist).
func parseDiagReply(b []byte, seq uint32) (inode, uid uint32, err error) {
	data, err := diagMsg(b, seq)
	if err != nil {
		return 0, 0, err
	}
	uid, inode = binary.NativeEndian.Uint32(data[64:]), binary.NativeEndian.Uint32(data[68:])
	if inode == 0 { // time-wait or orphaned: no process holds it
		return 0, uid, fmt.Errorf("socket without inode: %w", fs.ErrNotExist)
	}
	return inode, uid, nil
}

// inetDiagMark is INET_DIAG_MARK, the attribute holding the socket's mark, which the kernel
// adds for a requester with CAP_NET_ADMIN.
const inetDiagMark = 15

// parseDiagMark reads the socket's mark from the kernel's answer to diagRequest.
func parseDiagMark(b []byte, seq uint32) (uint32, error) {
	data, err := diagMsg(b, seq)
	if err != nil {
		return 0, err
	}
	ne := binary.NativeEndian
	for a := data[sizeofInetDiagMsg:]; len(a) >= unix.SizeofRtAttr; {
		l, typ := int(ne.Uint16(a[0:])), ne.Uint16(a[2:])
		if l < unix.SizeofRtAttr || l > len(a) {
			return 0, fmt.Errorf("sock_diag: attribute length %d of %d bytes", l, len(a))
		}
		if typ == inetDiagMark {
			if l < unix.SizeofRtAttr+4 {
				return 0, errors.New("sock_diag: short mark")
			}
			return ne.Uint32(a[unix.SizeofRtAttr:]), nil
		}
		a = a[min(len(a), (l+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1)):]
	}
	return 0, errors.New("sock_diag: no mark in the answer (not CAP_NET_ADMIN?)")
}

// diagMsg finds the inet_diag_msg (at least sizeofInetDiagMsg bytes, its attributes after
// it) of the answer seq in b.
func diagMsg(b []byte, seq uint32) ([]byte, error) {
	ne := binary.NativeEndian
	for len(b) >= unix.NLMSG_HDRLEN {
		l := ne.Uint32(b[0:])
		if l < unix.NLMSG_HDRLEN || uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("sock_diag: message length %d of %d bytes", l, len(b))
		}
		typ, mseq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		data := b[unix.NLMSG_HDRLEN:l]
		b = b[min(len(b), nlmsgAlign(int(l))):]
		if mseq != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_ERROR:
			if len(data) < 4 {
				return nil, errors.New("sock_diag: short error message")
			}
			errno := unix.Errno(-int32(ne.Uint32(data)))
			if errno == 0 {
				continue // an ack
			}
			if errno == unix.ENOENT {
				return nil, fmt.Errorf("no such socket: %w", fs.ErrNotExist)
			}
			return nil, fmt.Errorf("sock_diag: %w", errno)
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(data) < sizeofInetDiagMsg {
				return nil, fmt.Errorf("sock_diag: inet_diag_msg of %d bytes", len(data))
			}
			return data, nil
		case unix.NLMSG_DONE:
			return nil, fmt.Errorf("no such socket: %w", fs.ErrNotExist)
		}
	}
	return nil, errors.New("sock_diag: no answer in reply")
}

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// Processes lists the processes of this host with what a lookup knows of each (no
// services), and the name each goes by (Comm, when it is not App), its parent (PPID) and
// its network namespace; a process that ends while it reads is left out.
func (f *LinuxFinder) Processes() ([]Info, error) {
	names, err := readDirNames(f.procRoot)
	if err != nil {
		return nil, fmt.Errorf("proc list: %w", err)
	}
	var out []Info
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		owner, err := f.info(pid)
		if err != nil {
			continue
		}
		info := Info{Owner: owner}
		stat, err := os.ReadFile(filepath.Join(f.procRoot, n, "stat"))
		if err != nil {
			continue
		}
		comm, ppid, ok := parseStat(stat)
		if !ok {
			continue
		}
		if comm != info.App {
			info.Comm = comm
		}
		info.PPID = ppid
		info.NetNS, _ = NetNSOf(filepath.Join(f.procRoot, n))
		out = append(out, info)
	}
	return out, nil
}

// NetNSOf returns the inode of the network namespace of the process whose /proc directory
// is dir (/proc/self: the caller's main thread).
func NetNSOf(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "ns", "net"), &st); err != nil {
		return 0, fmt.Errorf("network namespace: %w", err)
	}
	return st.Ino, nil
}

// parseStat reads the command name and the parent's PID of /proc/PID/stat: "pid (comm)
// state ppid ...", where comm may hold spaces and parentheses (the last ')' ends it).
func parseStat(b []byte) (comm string, ppid int, ok bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	fields := strings.Fields(string(b[end+1:]))
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil || ppid < 0 {
		return "", 0, false
	}
	return string(b[open+1 : end]), ppid, true
}
