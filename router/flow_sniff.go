package router

import (
	"net"
	"time"

	"github.com/agentcage/router/router/sniff"
	"github.com/agentcage/router/rules/policy"
)

// sniffWait bounds how long a caged flow's set-up waits for the client's first bytes when
// the policy asks for the name they carry (policy.Policy.NeedsSniff). A client that carries a
// name (TLS, HTTP) sends it with the ACK that completes its connect, so it waits no longer
// than its bytes take to arrive; only a protocol where the server speaks first (SSH, SMTP,
// FTP), which sends nothing until it hears from the server, waits it out and goes on
// unnamed. 250 ms is well below the banner timeouts of those clients (OpenSSH waits for
// its ConnectTimeout, SMTP clients minutes) and above a loaded guest's scheduling delay
// between connect() returning and its first write; a client slower than that is unnamed
// (a fake IP's name still stands for it).
const sniffWait = 250 * time.Millisecond

// sniffConn reads c's first bytes into buf until sniff has its answer, buf is full, the
// client ends its side, or wait has passed; it returns how many bytes it read (the caller
// sends them on) and what they carry (More is never set).
func sniffConn(c *net.TCPConn, buf []byte, wait time.Duration) (int, sniff.Result) {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	n := 0
	for {
		res := sniff.Sniff(buf[:n])
		if !res.More || n == len(buf) {
			res.More = false
			return n, res
		}
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			// The wait is over, or the client ended its side or failed: what is in is all.
			res := sniff.Sniff(buf[:n])
			if res.More {
				res = sniff.Result{}
			}
			return n, res
		}
	}
}

// sniffed records what a flow's first bytes (first) carry (res) in pf for the policy, and the
// flow's name and its origin in f (policy.Policy.Name): the fake IP's name stands; a
// sniffed one names a flow that had none, or one whose name came from a DNS answer only,
// and becomes pf.Host, the name every later step sees (the set-up slots, the lookup that
// the host walls ask for a proxy on this host, the dial). A brokered credential's
// placeholder in the bytes or the names is a canary (pf.Canary, flow_canary.go).
func (r *Router) sniffed(p *compiled, f *FlowRecord, pf *policy.Flow, res sniff.Result, first []byte) {
	r.canary(p, f, pf, res.Name, first)
	pf.Sniffed = res.Name
	if name, fromSniff := p.Decision.Name(pf); fromSniff {
		f.Host, f.NameFrom = name, res.From.String()
		pf.Host = name
	}
}
