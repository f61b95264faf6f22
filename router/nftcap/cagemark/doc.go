// Package cagemark marks, in the kernel, every socket a caged process opens: an eBPF
// program on the cgroup v2 root's inet socket-creation hook (BPF_CGROUP_INET_SOCK_CREATE)
// asks whether the creating process is caged and, when it is and the socket is created in
// the network namespace the program was installed for, sets the socket's mark (SO_MARK) to
// Config.Mark.
//
// A caged process is known by what it runs, never by a name it sets: the program reads the
// name of the executable file of the calling task's process (current->mm->exe_file, the
// file /proc/PID/exe shows, so its base name after links are followed) and matches it
// against Config.Names; when it does not match, it asks the same of the process's parent
// (real_parent), and so on, up to 8 generations or init. So every thread of a caged
// process is caged whatever it is named (VirtualBox's NAT thread is named "NAT"), a caged
// binary renamed (prctl PR_SET_NAME, /proc/PID/comm, QEMU's -name process=) or started
// through a link or with another argv[0] is caged, every child a caged process forks or
// executes is caged, and an uncaged binary that takes a caged name (comm, argv[0], a link's
// name) is not. A child whose caged parent ended before it made the socket (re-parented to
// init or a subreaper) no longer has the caged parent in its line. A process the program
// caged once (it opened a socket while caged) stays caged, and with it its children, for
// as long as it lives, whatever it executes in its place: the program remembers it in an
// LRU map by thread group ID and start time (never reused together), which Install empties
// when a name is taken away. The offsets of the
// kernel's structures come from its BTF (/sys/kernel/btf/vmlinux); the helpers
// (bpf_get_current_task, bpf_probe_read_kernel) need CAP_PERFMON, which root has.
//
// A socket a caged process opened before the program was there (a NAT's pool of sockets,
// opened at its start) gets the mark when it connects (the connect4/connect6 hooks,
// through bpf_setsockopt), and an unconnected datagram it sends is refused with EPERM
// (sendmsg4/sendmsg6: no program may set a mark there). Every packet the socket sends
// carries that mark from its first one on, so the capture's nftables rules know a caged process's connection
// when it is made (no sock_diag race with a process that exits at once), loopback
// included, and the sockets of every other process are left alone.
//
// The programs are attached with the legacy BPF_PROG_ATTACH (BPF_F_ALLOW_MULTI), which
// needs no bpffs pin: the kernel holds each for as long as it is attached to the cgroup, so
// they outlive the process that installed them, like the nftables guard, until Remove. The
// five programs of one network namespace share two maps; Install finds them among those
// attached (by their names and the namespace cookie in the config map) and updates the
// maps in place, so a reload neither detaches nor replaces them.
//
// Names are executables' file names (base names, not paths), compared byte for byte: at
// most 63 bytes are read (longer names are cut), and a trailing '*' matches any suffix.
// Paths and other wildcards cannot be told in the kernel and are skipped (Keys reports
// them).
//
// The cost for the host: one short program run per inet socket created, per connect and per
// unconnected datagram sent on this machine (for a process of no caged line, nine kernel
// reads and two map lookups per generation up to init: about 0.6 µs); nothing per packet of
// a connected socket. Matches and Line tell in user space what the program decides (router status
// shows the caged processes as the kernel sees them); off Linux they are all the package
// has.
package cagemark
