// Package nftcap is the Linux capture layer: one nftables table the router owns (inet
// router by default) that redirects VM and, optionally, local TCP and DNS to the router's
// listeners (or, with Spec.TCPTProxy, hands VM TCP over by TPROXY) and guards the host while
// the router is down. It talks netlink (github.com/google/nftables); it never runs the nft
// binary.
//
// # Lifecycle
//
// Install replaces the table whole in one kernel transaction (add table if absent, delete
// it, add the new one): starting over a stale table left by a crash works, a refused batch
// leaves the old table untouched, and there is never a moment without a guard. The table has
// no owner flag, so it outlives the process: when the router stops or dies (SIGTERM,
// SIGKILL) redirected TCP hits a closed port and is reset, redirected DNS is refused
// (ICMP port unreachable / RST), forwarded VM traffic is refused. Only Remove (`router
// cleanup`) takes the guard away. Callers serialise Install and Remove on one table.
//
// # The hold table
//
// Install also replaces a second, small table, HoldTable ("inet router_hold"): a forward
// chain one priority after the router's table's that drops everything from and to the VM
// networks and interfaces; an input chain that lets a guest (and a caged socket) reach this
// host only where the router's table does (redirected connections, TPROXY's mark, replies,
// the forwards' and inbounds' listen addresses, DHCP, neighbour discovery); and, with
// CagedApps, an output chain that drops a caged socket's packets that would leave the host
// (not to lo, this host or a local prefix, not DHCP or LocalUDPAllow). The router's table refuses all of that first, so the hold table decides
// only while the router's table is missing. Its flags are owner and persist: the Holder
// that installed it (the running daemon's netlink socket) is the only one that may change
// it, a ruleset flush skips it, and when the socket closes the kernel keeps it without an
// owner, for the next Install to adopt or Remove to delete. Remove fails while a Holder is
// open. It needs Linux 6.9 (persist).
//
// Anyone with CAP_NET_ADMIN can still delete the router's table (`nft flush ruleset`, which a reload
// of the nftables service or of firewalld runs). Watch reports every kernel transaction that
// touches the table, with the process that made it, and Check compares the table in the
// kernel with what Install(spec) puts there (chains, their rule counts, the VM network
// sets), so that a running router finds the damage at once and installs the table again.
//
// # Chain layout
//
// For a Spec with VM networks 192.168.122.0/24 and fd00:122::/64, Local, ListenerPort L,
// DNSPort D, Mark M and one forward 192.168.122.1:47831, and the chains and rules TCPTProxy
// (with UDPMark U) adds (`nft list table inet router` prints the same; sets abbreviated):
//
//	table inet router
//	 set vm4, vm6                          VMNetworks, interval sets
//
//	 tcp_prerouting  filter, hook prerouting, priority mangle   only with TCPTProxy
//	   not tcp / iif lo                     return
//	   tcp dport {53, L}                    return   (left to the redirects below)
//	   ip saddr @vm4 / ip6 saddr @vm6 / iifname (each VMInterface)  goto tcp_vm
//	 tcp_vm
//	   ct state established                 goto tcp_tproxy   (checked at the first packet)
//	   jump antispoof
//	   fib daddr type {local,broadcast,multicast}; local prefixes  return
//	   goto tcp_tproxy
//	 tcp_tproxy
//	   tproxy ip to :L / tproxy ip6 to :L meta mark set U accept   (no transparent socket on
//	                                        L: no match, no mark; redirected below)
//	 prerouting  nat, hook prerouting, priority dstnat-10 (ahead of libvirt/docker dstnat)
//	   iif lo                               return   (the host's own packets)
//	   ip saddr @vm4 / ip6 saddr @vm6       goto vm_capture
//	   iifname "virbr0" / "vboxnet*" ...    goto vm_capture   (VMInterfaces: any source)
//	 vm_capture
//	   udp|tcp dport 53                     redirect to :D   (any destination, the host's
//	                                                           resolver too; D=0: return,
//	                                                           the filter chains refuse it)
//	   meta mark U                          return   (only with TCPTProxy: handed over)
//	   goto capture_tcp
//	 output      nat, hook output, priority -110          only when Local (or CagedApps)
//	   meta mark M                          return   (the router's own sockets)
//	   meta mark C                          goto caged_output   (only with CagedApps)
//	   oif lo                               return   (loopback and the host's own addresses)
//	   udp|tcp dport 53                     redirect to :D   (D=0: see output_guard)
//	   goto capture_tcp
//	 capture_tcp
//	   not tcp                              return
//	   fib daddr type {local,broadcast,multicast}  return
//	   ip daddr {0/8,127/8,169.254/16,224/4,255.255.255.255}  return
//	   ip6 daddr {::,::1,fe80::/10,ff00::/8}                 return
//	   tcp                                  redirect to :L
//	 output_guard  filter, hook output    only when Local
//	   meta mark M / oif lo                 return   (own sockets; redirected DNS and TCP)
//	   udp|tcp dport 53                     goto refuse_dns  (only when D=0)
//	   icmpv6 type {nd-*, mld-*} / igmp     return   (the link's control traffic)
//	   icmp|icmpv6, ct state related, to @vm4/@vm6 or oifname (each VMInterface)
//	                                        return   (the refusals' ICMP errors to guests)
//	   fib daddr type local                 return
//	   loopback, link-local unicast dst     return
//	   tcp                                  return   (captured by the nat output chain)
//	   udp dport {67,68,546,547, LocalUDPAllow}  return   (DHCP, e.g. NTP if allowed)
//	   everything else (UDP, multicast and broadcast included, ICMP, ...)
//	                                        goto refuse_local  (the router cannot proxy it)
//
//	 input       filter, hook input, priority filter, policy accept
//	   meta mark U                          accept   (TCPTProxy or UDPPort: handed over)
//	   ct state established ct status dnat tcp dport L; udp|tcp dport D
//	                                        accept   (a redirected connection's later
//	                                                  packets: every rule below would)
//	   jump antispoof
//	   tcp dport L, ct status !dnat         goto refuse_host_off_limits  (from anywhere: only
//	   udp|tcp dport D, ct status !dnat     goto refuse_host_off_limits   redirected connections
//	                                                                        use the listeners)
//	   ip daddr 192.168.122.1 tcp dport 47831  goto forward_0   (one per forward)
//	   ip daddr ... tcp dport ...           goto inbound_N   (one per inbound, alike)
//	   iif lo                               accept
//	   ip saddr @vm4 / ip6 saddr @vm6       goto vm_input
//	   iifname (each VMInterface)           goto vm_input
//	 forward_N, inbound_N   (Allow of forward or inbound N)
//	   ip saddr {allow4} / ip6 saddr {allow6}  accept
//	   goto refuse_forward_source
//	 vm_input    "the host is off limits"
//	   ct state established,related ct direction reply  accept  (replies to the host's own)
//	   tcp dport L; udp|tcp dport D         accept   (redirected, checked above)
//	   udp dport {67,547}                   accept   (DHCPv4, DHCPv6)
//	   icmpv6 type {nd-router-solicit,nd-neighbor-solicit,nd-neighbor-advert}  accept
//	   goto refuse_host_off_limits
//	 forward     filter, hook forward, priority filter, policy accept
//	   jump antispoof
//	   ip saddr @vm4 / ip6 saddr @vm6       goto refuse_guest  (not redirected: not proxiable)
//	   ip daddr @vm4 / ip6 daddr @vm6       goto refuse_to_guest
//	   iifname (each VMInterface)           goto refuse_guest
//	   oifname (each VMInterface)           goto refuse_to_guest
//	 antispoof   first packet of a flow must route back via its input interface
//	   ct state established,related / iif lo / ip saddr 0.0.0.0 / ip6 saddr ::  return
//	   fib saddr . mark . iif oif missing   goto refuse_spoofed_source
//	 refuse_guest   what the cage sent that capture did not take, sorted by protocol
//	   udp|tcp dport 53                     goto refuse_dns
//	   udp                                  goto refuse_guest_udp
//	   icmp|icmpv6                          goto refuse_icmp
//	                                        goto refuse_not_carried
//	 refuse_local   the same for this host's own (Local): udp goes to refuse_local_udp
//	 refuse_<reason>   one per reason (host_off_limits, forward_source, dns, guest_udp, icmp,
//	                   not_carried, local_udp, spoofed_source, to_guest)
//	   limit rate 20/second log group G prefix "<reason>" snaplen 80   (with LogGroup)
//	   counter name "refused_<reason>"      goto refuse  (spoofed_source, to_guest: drop)
//	 udp_prerouting  filter, hook prerouting, priority mangle   only with UDPPort
//	   see udp_linux.go: VM UDP but DNS (and, with Local, the host's own, marked by the
//	   route chain udp_output and rerouted to lo) → tproxy to :UDPPort, mark UDPMark;
//	   input accepts that mark first and refuses any other datagram to UDPPort
//	 caged_output, caged_input, udp_caged   only with CagedApps: the sockets of caged
//	   processes, marked C by package cagemark; see caged_linux.go
//	 refuse      the only place packets are refused; its counters total the refusals
//	   meta pkttype != host                 drop     (broadcast, multicast)
//	   ip6 saddr fe80::/10                  reject with icmpx admin-prohibited (a reset
//	                                                  to a link-local address finds no route)
//	   tcp                                  reject with tcp reset
//	                                        reject with icmpx admin-prohibited
//
// # Semantics the daemon relies on
//
//   - VM TCP to anything but the host itself, loopback, link-local, multicast or broadcast
//     reaches the listener on [::]:L (dual stack); OriginalDst gives the address it was
//     sent to. The accepted connection's remote address is the VM's. With TCPTProxy and a
//     transparent listener (TransparentControl) TPROXY hands it over unchanged: its local
//     address is its original destination, and no NAT is set up; TCP to port L or 53, and
//     all of it while no transparent socket listens on L, is redirected. The policy routing
//     TPROXY needs is the UDP capture's (below). The host's own TCP (Local, CagedApps) is
//     always redirected: TPROXY works in prerouting, not on the output path.
//   - VM DNS (UDP and TCP 53, to any address) reaches D on the VM-facing address. Local DNS
//     is redirected to 127.0.0.1 / ::1: the DNS server must answer from the address a query
//     was sent to (IP_PKTINFO / IPV6_PKTINFO, as miekg/dns does), or conntrack cannot map
//     the answer back.
//   - With UDPPort, VM UDP other than DNS to anything but a local destination reaches the
//     transparent sockets on UDPPort (ListenUDP) unchanged, with its original destination;
//     answers sent from a socket bound to that destination (ListenReply) reach the VM. The
//     policy routing this needs (a rule on UDPMark, a table with one local route per family)
//     is installed and removed with the table (rtnetlink). Nobody listening: refused as
//     below.
//   - Everything else from a VM network or a VM interface is refused: forwarded traffic of
//     any protocol and family, the host's services (only the forwards, DHCP, neighbour
//     discovery and the listeners), and spoofed sources outside the VM networks
//     (antispoof). A VM interface is caged whole: a guest address outside VMNetworks (a
//     second IPv4 address, any IPv6 address, link-local included) is caged like the listed
//     ones. Refused means
//     a TCP reset or an ICMP administratively-prohibited error, so clients fail at once;
//     broadcast and multicast are dropped silently. Traffic forwarded *to* a VM network is
//     dropped. VMNetworks must cover every network routed to VM-facing interfaces.
//   - Forward and inbound listen addresses take only their Allow sources, from anywhere (a
//     LAN host or the host itself included); others are refused.
//   - With Local, the host's own TCP and DNS are captured like a VM's, except sockets
//     carrying Mark (exact match), loopback and the host's own addresses; with UDPPort its
//     UDP too (but DHCP and LocalUDPAllow); the host's other UDP (multicast and broadcast
//     included) and ICMP are refused, but for DHCP, LocalUDPAllow and the link's control
//     messages (neighbour discovery, MLD, IGMP).
//   - With CagedApps, the sockets of those processes (marked CagedMark by the kernel at
//     their creation, package cagemark) are captured whatever Local says: DNS to any
//     address (a loopback stub included) reaches D, TCP to every destination (loopback and
//     this host's addresses included; not a forward's or inbound's listen address) reaches
//     L, UDP the transparent sockets; of this host they reach only the listeners and the
//     forwards and inbounds (their Allow), the rest is refused; with nobody listening all of
//     it is refused. The host's other processes keep their loopback.
//   - Other tables are untouched; traffic that involves no VM network and no listener port
//     passes (policies accept), except spoofed first packets (antispoof).
//
// Every refusal passes the chain of its reason, whose named counter counts it (Refusals
// reads them; an Install starts them at zero) and which, with Spec.LogGroup, sends a few a
// second to the daemon over NFLOG so status can show the latest (package nflog). The log
// rule is rate limited and never decides: without a reader, or past the limit, the packet
// is refused all the same.
//
// OriginalDst, MarkControl, SetMark and TransparentControl are the socket side: the
// listener asks where a captured connection was going, the router marks its own sockets so
// they are never captured, and its listener is transparent for TCPTProxy. Off Linux every function returns an error wrapping errors.ErrUnsupported.
package nftcap
