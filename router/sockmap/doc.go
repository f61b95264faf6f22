// Package sockmap moves the bytes of a relayed TCP flow socket to socket inside the Linux
// kernel: an eBPF stream verdict program, attached to a SOCKMAP that holds both sockets of
// each flow, redirects every segment a socket receives to the egress of its peer. The
// program is assembled at run time with cilium/ebpf's asm package (no compiler, no object
// file); it reads one field of the kernel's struct tcp_sock, whose offset Load takes from
// the kernel's BTF. Other platforms have no such thing: the package is empty there.
//
// # What the kernel does not do, and how this package makes up for it
//
// Backpressure. An egress redirect queues the segment on the peer's psock and the source's
// receive window reopens at once: a fast sender and a slow reader would grow the kernel's
// memory without bound. The program reads how far the peer is behind (all that went to the
// peer, redirected or sent by the caller, minus how far the peer's write_seq advanced:
// what its psock still queues) and past Config.Budget it stops redirecting that direction:
// it passes the segments to the source socket's own receive queue (SK_PASS), which is
// charged to the source's receive buffer, so the TCP window closes as it would without the
// sockmap. It reports the trip on a ring buffer (Event). The caller then waits until the
// peer took every redirected byte (Drained), copies the passed bytes itself, in order, and
// reports what it sent (SetSent); once it sent every passed byte, the program redirects
// again on the next segment. A new trip while the caller copies shows in Trips.
//
// Half-close. The sockmap does not forward a FIN. The caller sees the source's EOF
// (EPOLLRDHUP) and half-closes the peer only once the peer took every redirected byte
// (Drained), after a Kick (a receive takes the socket's lock: the kernel reports the FIN
// before it runs the verdict of the segment that carried it). Passed bytes may reach the
// receive queue after the FIN (they wait behind the segments the socket's psock sends), so
// the caller counts what it read against Passed rather than trusting EOF.
//
// Teardown. Removing a socket from the map while its psock still queues segments drops
// them. The package never removes a socket: the caller closes both sockets once both
// directions ended, which takes them out of the map.
//
// Entry. The program takes whole segments off the receive queue; a segment the caller
// read half of (a splice cut by a full pipe) would be sent again. Add must come after a
// read that ended with EAGAIN. A socket that sent or received a FIN cannot join a map.
//
// Accounting. The program counts per socket the bytes it redirected and passed, in an
// array map shared with this process (mmap): reading the live counters costs no system
// call.
package sockmap
