package lint

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentcage/router/rules"
)

// CheckUngatedModel is a direct rule that opens this host's loopback to caged traffic at a
// port no forward connects to: the flows it lets through are relayed raw, and only a
// forward's gate would check a model server's calls there.
const CheckUngatedModel = "ungated-loopback"

var (
	loopback4 = netip.MustParseAddr("127.0.0.1")
	loopback6 = netip.IPv6Loopback()
)

// ungated reports each direct rule that may decide caged flows (not a catch-all for this
// host's own traffic), names this host's loopback (127.0.0.1, ::1, a range holding them, or
// localhost), and opens a port (or a range) that is not exactly a forward's connect port.
// A caged flow there (a user-space NAT's connection for its guest) meets a forward's gate
// only when a forward connects to that port (policy.Policy.Gate); elsewhere the router
// cannot tell a model server from any other service, and passes it raw. So it is an error:
// a user-space NAT guest would reach a model server's management calls (Ollama's pull,
// push, create, delete) unchecked.
//
// Not for Windows: its capture never diverts loopback, so a caged process's connection to
// the model on 127.0.0.1 is never the router's there, gate or no gate (a guest reaches the
// gate at the forward's listen address).
func (l *linter) ungated() {
	if l.goos() == "windows" {
		return
	}
	connects := map[uint16]bool{}
	for _, f := range l.cfg.Forwards {
		connects[f.Connect.Port()] = true
	}
	for i := range l.cfg.Rules {
		r := &l.cfg.Rules[i]
		if r.Disabled || r.Action != rules.Direct || r.HostOnly() || len(r.Ports) == 0 || !namesLoopback(r) {
			continue
		}
		var open []string
		for _, p := range r.Ports {
			if p.Lo == p.Hi && connects[p.Lo] {
				continue
			}
			s := strconv.Itoa(int(p.Lo))
			if p.Hi != p.Lo {
				s += "-" + strconv.Itoa(int(p.Hi))
			}
			open = append(open, s)
		}
		if len(open) == 0 {
			continue
		}
		ports := strings.Join(open, ", ")
		l.add(Finding{Severity: Error, Check: CheckUngatedModel, Line: l.ruleLine(i), Rule: r.Name,
			Message: fmt.Sprintf("%s opens this host's loopback at port %s to caged traffic, and no [[forward]] connects there: a user-space NAT's guest (QEMU -netdev user, slirp4netns, pasta, VirtualBox NAT) reaches what listens there raw, a model server's management calls included (Ollama's pull, push, create, delete)", l.ruleRef(i), ports),
			Fix:     fmt.Sprintf("add a [[forward]] with connect = \"127.0.0.1:%s\": its HTTP gate then serves these flows (api = \"tcp\" makes it a raw pipe on purpose); or drop the port from the rule", open[0])})
	}
}

// namesLoopback reports whether r's hosts name this host's loopback.
func namesLoopback(r *rules.Rule) bool {
	for _, h := range r.Hosts {
		switch h.Kind {
		case rules.HostRange:
			if h.Range.Contains(loopback4) || h.Range.Contains(loopback6) {
				if !wholeRange(h.Range) {
					return true
				}
			}
		case rules.HostName:
			if h.Name == "localhost" {
				return true
			}
		}
	}
	return false
}

// wholeRange reports whether r is 0.0.0.0/0 or ::/0 (a catch-all the walls never take as
// naming the host).
func wholeRange(r rules.IPRange) bool {
	return r.Lo.IsUnspecified() && (r.Hi == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || r.Hi.Is6() && r.Hi.Next() == (netip.Addr{}))
}
