package dns

import (
	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/rules/refusal"
)

// extendedError adds an Extended DNS Error (RFC 8914) to m, so that a client (and the
// agent reading its error) can tell the router's refusal from a network fault: code is the
// EDE INFO-CODE (section 4: 15 "Blocked" for what the policy, the walls or a budget refuse,
// 18 "Prohibited" for a canary), text says what was refused and why (the refusal's reason or
// rule, never a secret). It goes in the OPT record the answer already carries when the client sent EDNS
// (RFC 8914 section 2: an EDE lives only in an OPT); a client that sent none gets the rcode
// alone, as before.
func extendedError(m *mdns.Msg, code uint16, text string) {
	opt := m.IsEdns0()
	if opt == nil {
		return
	}
	opt.Option = append(opt.Option, &mdns.EDNS0_EDE{InfoCode: code, ExtraText: text})
}

// refusedText is the EDE text of a query refused for why, when no rule names it.
func refusedText(why refusal.Reason, what string) string {
	return "router: " + what + " (refused: " + why.String() + ")"
}
