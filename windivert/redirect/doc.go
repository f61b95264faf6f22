// Package redirect is the packet-level capture engine: it takes the host's outbound IP
// packets from a Device, decides per new flow what happens to it, and hands the flows that
// the router must carry to the router's transparent listener by rewriting packets
// ("reflection", the trick of WinDivert's streamdump example). It is platform-neutral: on
// Windows the Device is a set of WinDivert handles (WinDivertDevice), on Linux a TUN device
// (TUN, used by the end-to-end test that drives the real kernel TCP stack through the
// engine), in unit tests a fake.
//
// # Reflection
//
// A is the app's address, pa its port, D:pd where it connects, X:L the listener (X is A
// itself on Windows, Options.ReflectTo on a TUN) and pr the port the listener sees (pa
// unless another live flow already uses D:pa, then another free port):
//
//	app A:pa                    engine                                   listener X:L
//	  │ SYN A:pa → D:pd  ──out──► owner? rules? reflect:
//	  │                           flows[A:pa→D:pd] = {peer D:pr, to X:L}
//	  │                           byPeer[D:pr]     = same flow
//	  │                           rewrite to D:pr → X:L ───────in──────────► accept(): peer D:pr
//	  │                                                                     OriginalDst(D:pr) = D:pd
//	  │                           byPeer[D:pr] ◄──────out── X:L → D:pr (SYN-ACK, data, FIN)
//	  │ ◄──in── D:pd → A:pa       rewrite
//	  │ A:pa → D:pd (ACK, data)──out──► flows[A:pa→D:pd]: rewrite to D:pr → X:L ──in──► listener
//
// Only addresses and ports change; sequence numbers, options and payload stay, so the two
// real TCP stacks (the app's and the listener's) negotiate everything between themselves.
// Checksums are updated incrementally (RFC 1624) when the device vouches for them
// (Meta.ChecksumsValid) and recomputed from scratch otherwise (Windows checksum offload
// hands out packets with garbage checksums). The listener learns the original destination
// from OriginalDst (the NAT table, looked up by the accepted connection's peer address) and
// the owner from Owner.
//
// # Decisions
//
// A new flow is a TCP SYN (without ACK) or the first UDP datagram of a 5-tuple. It is
// held (pending) until its owner is known when the owner matters: with an EventSource
// (WinDivert's SOCKET layer, whose CONNECT event carries the PID and arrives before the SYN
// in the normal order; the engine handles both orders) every new flow waits for its event,
// at most Options.EventWait, then falls back to Options.Lookup (the IP Helper table on
// Windows, sock_diag on Linux); without an EventSource only rule sets that name apps or
// services wait for Lookup. Then the flow is decided by package policy (the one decision
// the Linux relay and `router explain` make too; see redirect/decide.go for how a decision
// becomes an action):
//
//   - the router's own processes (Options.OwnPIDs) and outbound SYN-ACKs (the host serving
//     a connection) pass; a local destination (policy.IsLocal) passes without any state when
//     no owner could change that (with caged apps in the rules it waits for its owner);
//   - DNS (port 53, a link-local resolver's too): UDP is answered in process by Options.DNS
//     (the answer injected inbound), TCP reflected to the DNS server's TCP port
//     (Options.DNSPort). With [dns] capture = "all" DNS waits for the PID only (the router's
//     own queries pass); with "caged" it waits for the owner, and a query of a process that
//     is not caged is passed unchanged (policy.StepDNSUncaged);
//   - with local = false, a flow of a process that is not caged passes, whatever the rules
//     say (policy.StepUncaptured);
//   - a refusal (a block rule, the host off limits to caged traffic, a fake IP nobody was
//     given, DNS over TLS or QUIC not through a proxy, a caged flow no rule decides) drops
//     the SYN and injects a RST to the app, or drops UDP;
//   - a fake-IP pool address with its name is reflected for TCP (only the router can hand
//     the proxy its name, or resolve it for a direct flow) and dropped for UDP;
//   - direct passes (or reflects with Options.ReflectDirect: a TUN has nowhere to pass a
//     packet to); proxy reflects TCP and drops UDP (UDP is not carried yet);
//   - a verdict that a host-name rule could still change (a name rule comes before the
//     winning rule and the destination's name is unknown here: policy.Decision.Final) is
//     not final: TCP is then reflected (the router decides with the name) and UDP dropped.
//   - ICMP echo requests are decided apart (policy.DecideICMP): they pass only for a known
//     process that is not caged, with local = false; the rest is dropped.
//
// Every later packet of a known flow follows the decision taken for its first; an outbound
// TCP packet of no known flow (a connection older than the engine, or whose entry expired)
// is refused with a RST, so the app reconnects through the rules. Callers that must keep
// older connections alive register them with AllowExisting.
//
// ICMP echo requests are flows too (the type in place of the source port, the code in place
// of the destination port, as Windows' socket events give them): policy.DecideICMP passes
// those of this host's own processes when local = false and drops the rest; no proxy
// carries ICMP.
//
// # Devices
//
// WinDivertDevice (Windows) diverts, on one NETWORK handle, every outbound non-loopback TCP
// packet of the host, its UDP (all of it, or with WinDivertConfig.UDP only the ports the
// caged apps may use: with local = false the WFP guard refuses the rest of theirs, so the
// host's other UDP never crosses user mode), DNS, ICMP echo requests and the listeners'
// answers, except the router's own endpoints (its reserved source ports, its upstreams, the
// forwards' answers); a SOCKET handle sniffs connect events (EventSource); a
// higher-priority DROP handle keeps the network off the listener ports. "Pass" re-injects a
// packet outbound unchanged, Impostor flag kept. What one read batch gives is sent back with
// one call (BatchDevice: WinDivertSendEx).
//
// A TCP packet of a flow the engine passed still crosses user mode: WinDivert's filters are
// fixed when the handle opens and know no flows, so the later packets of a caged flow
// reflected to the listener and those of a host flow passed untouched look alike to them.
// What is left per such packet is a lookup in the table and its share of one SendEx.
//
// TUN (Linux) is the test bed for the same engine against the real kernel TCP stack.
// Whatever the host routes into it is read as outbound; what the engine writes arrives in
// the host. A TUN cannot pass a packet on (ErrCannotPass), so only the destinations under
// test are routed into it and the engine runs with ReflectDirect; flows are reflected to
// the TUN's own address (ReflectTo), which also serves forwarded flows whose source is not
// an address of the host. The router's own sockets are kept out of the TUN by policy
// routing on their mark (see e2e/tun_test.go).
//
// # Table
//
// Entries expire: a reflected or passed TCP flow Linger after a RST or a FIN in both
// directions, any TCP flow after Idle without packets, a UDP decision after UDPIdle, a
// pending flow when its owner lookup ends. The table holds at most MaxFlows entries; a new
// flow that finds it full (after a sweep, and after evicting the host's oldest passed UDP
// entry) is refused (fail closed). Within it the host's own passed flows and the flows
// waiting for their owner have shares (MaxHostFlows, MaxPending), so that a host app
// opening flows by the thousand cannot refuse the VM's. Connect events are kept
// EventTTL, or until their CLOSE event.
//
// # Concurrency
//
// Run reads the device on one goroutine; owner lookups and DNS answers run on worker
// goroutines (DNS bounded by Options.DNSWorkers); expiry runs on a ticker. One mutex, Engine.mu,
// guards the table (flows, byPeer, pending, events); the device is written without holding
// it, from any of these goroutines, so a Device's Write must be safe for concurrent use.
// OriginalDst, Owner, Flow and Stats may be called at any time from any goroutine.
package redirect
