package lint

import (
	"fmt"
	"strconv"
)

// inbounds reports an inbound listening on every address: an open proxy for anyone on any
// network this host joins, the allow list its only gate.
func (l *linter) inbounds() {
	for i, in := range l.cfg.Inbounds {
		if !in.Listen.Addr().IsUnspecified() {
			continue
		}
		name := "inbound #" + strconv.Itoa(i+1) + " " + strconv.Quote(in.Name)
		l.add(Finding{Severity: Error, Check: CheckInboundAny, Line: in.Line, Rule: in.Name,
			Message: fmt.Sprintf("%s listens on %s: anyone on any network this host joins (a shared Wi-Fi) reaches a proxy into the cage's upstreams, stopped only by its allow list", name, in.Listen),
			Fix:     "listen on the VM-facing address only (e.g. the internal switch's 172.30.16.1)"})
	}
}
