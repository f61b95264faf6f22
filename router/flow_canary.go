package router

import (
	"github.com/agentcage/router/rules/policy"
)

// canary looks for the brokered credentials' placeholders (Settings.Credentials) in what a
// caged flow's client wrote first (a plaintext request's line, headers and the start of its
// body) and in the names it gave (a TLS server name or an HTTP Host, a fake IP's name, a name
// an inbound's client asked for). A hit sets pf.Canary, which the policy refuses
// (policy.StepCanary: counted as canary), and is logged once per credential, source and
// destination. Only the first bytes are read (those the name is read from, up to sniff.Max):
// a placeholder later in a stream, or inside TLS, is not seen here.
func (r *Router) canary(p *compiled, f *FlowRecord, pf *policy.Flow, sniffed string, first []byte) {
	creds := p.Credentials
	if creds.Empty() || pf.Canary != "" {
		return
	}
	hit, found := creds.FindName(sniffed, "the name in its first bytes")
	if !found {
		hit, found = creds.FindName(pf.Host, "its destination's name")
	}
	if _, bound := p.boundDest(pf); !found && !bound {
		// A flow to a brokered destination has each request judged (flow_credential.go).
		hit, found = creds.Find(first, "its first bytes")
	}
	if !found {
		return
	}
	pf.Canary = hit.Credential
	dst := pf.Host
	if dst == "" {
		dst = pf.Dst.String()
	}
	if r.canaries.First(hit.Credential + " " + f.Src.Addr().String() + " " + dst) {
		r.opts.Log.Warn("canary: a caged flow carried a brokered credential's placeholder; refused",
			"credential", hit.Credential, "where", hit.Where, "src", f.Src, "dst", dst)
	}
}
