// Package cagemark marks, in the kernel, every socket a caged process opens: an eBPF
// program on the cgroup v2 root's inet socket-creation hook (BPF_CGROUP_INET_SOCK_CREATE)
// reads the creating task's command name (comm) and, when it is one of Config.Names and the
// socket is created in the network namespace the program was installed for, sets the
// socket's mark (SO_MARK) to Config.Mark. A socket the process opened before the program
// was there (a NAT's pool of sockets, opened at its start) gets the mark when it connects
// (the connect4/connect6 hooks, through bpf_setsockopt), and an unconnected datagram it
// sends is refused with EPERM (sendmsg4/sendmsg6: no program may set a mark there). Every packet the socket sends carries that mark
// from its first one on, so the capture's nftables rules know a caged process's connection
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
// Names match the way the kernel spells comm: at most 15 bytes (longer names are cut, as
// the kernel cuts them), compared byte for byte; a trailing '*' matches any suffix. Other
// wildcards cannot be told in the kernel and are skipped (Skipped reports them).
//
// The cost for the host: one short program run per inet socket created, per connect and per
// unconnected datagram sent on this machine (two map lookups); nothing per packet of a
// connected socket. Off Linux the package is empty.
package cagemark
