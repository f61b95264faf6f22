// Package sockmap moves the bytes of a relayed TCP flow socket to socket inside the Linux
// kernel: an eBPF stream verdict program, attached to a SOCKMAP that holds both sockets of
// each flow, redirects every segment a socket receives to the egress of its peer. The
// program is assembled at run time with cilium/ebpf's asm package (no compiler, no object
// file). Other platforms have no such thing: the package is empty there and the relay
// copies.
//
// # What the kernel does not do, and how this package makes up for it
//
// Backpressure. An egress redirect queues the segment on the peer's psock and the source's
// receive window reopens at once: a fast sender and a slow reader would grow the kernel's
// memory without bound. The program therefore reads how far the peer socket is behind (the
// bytes it redirected minus how far the peer's write_seq advanced, which is the peer's psock
// queue) and, past Config.Budget, stops redirecting that direction for good: from then on it
// passes the segments to the source socket's own receive queue (SK_PASS), which is charged
// to the source's receive buffer, so the TCP window closes as it would without the
// sockmap. It reports the switch on a ring buffer (Events); the relay then waits until the
// peer took every redirected byte (Drained) and copies the passed bytes itself, in order.
// The switch is one-way (sticky): redirecting again would race with the bytes the relay
// holds.
//
// Half-close. The sockmap does not forward a FIN. The relay sees the source's EOF
// (EPOLLRDHUP) and half-closes the peer only when nothing of the source is left unread
// (Unread: the kernel may run the verdict of the last segment after it reported the FIN)
// and the peer took every redirected byte (Drained).
//
// Teardown. Removing a socket from the map while its psock still queues segments drops them.
// The package never removes a socket: the relay closes both sockets once both directions
// ended, which takes them out of the map.
//
// Accounting. The program counts per socket the bytes it redirected and passed, in an
// array map shared with this process (mmap): reading the live counters costs no system
// call.
package sockmap
