package router

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/router/sniff"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// How a caged flow the policy refused is told so, on every transparent set-up path (the
// event loops' and the goroutines'), so that the agent behind it reads a refusal as a
// refusal, not as a network fault it should retry around:
//
//	a plaintext HTTP/1 request   HTTP/1.1 403 Forbidden, Connection: close, whose body says
//	                             what was refused, by which rule or step, and how the host's
//	                             owner can allow it (policy.RefusalText: the words the DNS
//	                             answer's Extended DNS Error uses)
//	TLS, or any other bytes      a reset as soon as they are in
//	nothing within sniffWait     a reset then (a protocol whose server speaks first)
//
// A flow refused for anything but the policy's decision (its source over its budget, a
// capture fault, no set-up slot) and a flow that is not caged keep the reset at once.
// Counting and logging are the set-up's, as for every refusal.

// answersRefusal reports whether a flow refused by d is told why (answerRefused) instead of
// reset at once: a caged flow the policy refused (not a DNS flow reaching a listener).
func answersRefusal(d policy.Decision) bool {
	return d.Caged && d.Action == rules.Block && d.Step != policy.StepDNS
}

// refusedLinger bounds how long an answered refusal waits for the client to close its side
// after the answer (it reads and drops what the client still sends, at most refusedDrain
// bytes), so that the close is a FIN the client reads the answer before, not a reset that
// may discard it.
const (
	refusedLinger = time.Second
	refusedDrain  = 64 << 10
)

// answerRefused tells the client of a caged flow that d refused why (see the top of this
// file), then closes c. first are the client's first bytes the router read already (nil:
// none; bytes left in the socket are read here). f is the flow's record, for what was
// refused. It blocks for at most sniffWait plus refusedLinger: callers run it on a goroutine
// of the flow's own.
func (r *Router) answerRefused(c *net.TCPConn, f *FlowRecord, d policy.Decision, first []byte) {
	buf := r.sniffBufs.Get().(*[sniff.Max]byte)
	defer r.sniffBufs.Put(buf)
	n := copy(buf[:], first)
	kind := sniff.KindOf(buf[:n])
	if kind == sniff.KindMore {
		_, kind = readKind(c, buf[:], n, sniffWait)
	}
	if kind != sniff.KindHTTP {
		reset(c)
		return
	}
	c.SetDeadline(time.Now().Add(refusedLinger))
	if _, err := c.Write(refusal403(f, d)); err != nil {
		reset(c)
		return
	}
	c.CloseWrite()
	drained := 0
	for drained < refusedDrain {
		m, err := c.Read(buf[:])
		drained += m
		if err != nil {
			break
		}
	}
	c.Close()
}

// readKind reads c's first bytes into buf after the n already in it, until sniff.KindOf
// tells what they are, buf is full, the client ends its side, or wait has passed; it
// returns how many bytes buf holds and their kind (never KindMore).
func readKind(c *net.TCPConn, buf []byte, n int, wait time.Duration) (int, sniff.Kind) {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	for {
		kind := sniff.KindOf(buf[:n])
		if kind != sniff.KindMore {
			return n, kind
		}
		if n == len(buf) {
			return n, sniff.KindOther
		}
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			if kind = sniff.KindOf(buf[:n]); kind == sniff.KindMore {
				kind = sniff.KindOther
			}
			return n, kind
		}
	}
}

// refusal403 is the answer to a refused HTTP request of flow f (see refusalBody), on the
// transparent path and the HTTP inbound alike.
func refusal403(f *FlowRecord, d policy.Decision) []byte {
	body := refusalBody(f, d)
	return []byte("HTTP/1.1 403 Forbidden\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Cache-Control: no-store\r\n" +
		"Connection: close\r\n" +
		"\r\n" + body)
}

// refusalBody says what of flow f was refused (its name, or its address, and port) and why
// (policy.RefusalText). It names a rule, never a config's values.
func refusalBody(f *FlowRecord, d policy.Decision) string {
	what := f.Dst.String()
	if f.Host != "" {
		what = f.Host + ":" + strconv.Itoa(int(f.Dst.Port()))
	}
	what = strings.Map(func(c rune) rune {
		if c <= ' ' || c > '~' {
			return '?' // a name is the guest's input: nothing of it may end a line or the head
		}
		return c
	}, what)
	return "router: " + what + " refused\n" + policy.RefusalText(d) + "\n"
}
