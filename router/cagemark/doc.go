// Package cagemark marks, in the kernel, every socket a caged process opens: an eBPF
// program on the cgroup v2 root's inet socket-creation hook (BPF_CGROUP_INET_SOCK_CREATE)
// reads the creating task's command name (comm) and, when it is one of Config.Names and the
// socket is created in the network namespace the program was installed for, sets the
// socket's mark (SO_MARK) to Config.Mark. Every packet the socket sends carries that mark
// from its first one on, so the capture's nftables rules know a caged process's connection
// when it is made (no sock_diag race with a process that exits at once), loopback
// included, and the sockets of every other process are left alone.
//
// The program is attached with the legacy BPF_PROG_ATTACH (BPF_F_ALLOW_MULTI), which needs
// no bpffs pin: the kernel holds it for as long as it is attached to the cgroup, so it
// outlives the process that installed it, like the nftables guard, until Remove. One
// program serves one network namespace; Install finds the program of its namespace among
// those attached (by its name and the namespace cookie in its config map) and updates its
// maps in place, so a reload neither detaches nor replaces it.
//
// Names match the way the kernel spells comm: at most 15 bytes (longer names are cut, as
// the kernel cuts them), compared byte for byte; a trailing '*' matches any suffix. Other
// wildcards cannot be told in the kernel and are skipped (Skipped reports them).
//
// The cost for the host: one short program run per inet socket created on this machine
// (two map lookups); nothing per packet. Off Linux the package is empty.
package cagemark
