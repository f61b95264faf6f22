// Package bench holds the parts of the data-path benchmark (cmd/routerbench) that are worth
// testing on their own: the lean sink and its load clients, the agent's workload (an HTTPS
// file server with a self-signed certificate and its burst of fresh-connection fetches, a
// streaming fake model server and its timed client), the readers of /proc that bill CPU
// time and memory to a process, the paired statistics, and a process handle that ends what
// it started by PID.
//
// # Wire protocol of the sink
//
// A client connects and sends one line:
//
//	GET <n>\n   the sink writes n bytes (from one shared read-only buffer) and closes
//	STAT\n      the sink answers "<parked>\n" and closes
//
// or, for a router that reads names from the Host header, GET's HTTP/1.1 form (Request):
// "GET <n> HTTP/1.1\r\nHost: <name>\r\n\r\n", answered alike once its head is in.
//
// parked counts the connections that have sent at least one byte but no complete line yet:
// an idle benchmark flow sends "GET 1" without the newline, so every flow that really
// crossed the proxy is parked at the sink until the client closes it. The sink reads at
// most 512 bytes of a request and never allocates per connection beyond its goroutine.
//
// The sink is the active closer, so TIME_WAIT stays on the sink's side (the lab sets
// tcp_max_tw_buckets=0 there, so a reused port is never refused by the PAWS timestamp check).
package bench
