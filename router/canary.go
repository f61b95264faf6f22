package router

import (
	"sync"
	"sync/atomic"

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
	if !found {
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
	if r.canaries.first(hit.Credential + " " + f.Src.Addr().String() + " " + dst) {
		r.opts.Log.Warn("canary: a caged flow carried a brokered credential's placeholder; refused",
			"credential", hit.Credential, "where", hit.Where, "src", f.Src, "dst", dst)
	}
}

// maxCanaryLogged bounds the canaries remembered as logged; past it every hit is logged.
const maxCanaryLogged = 4096

// onceLog remembers what was logged, so that a canary is logged once per credential, source
// and destination however often it trips. The zero onceLog is ready; safe for concurrent use.
type onceLog struct {
	seen sync.Map
	n    atomic.Int64
}

// first reports whether key is seen for the first time (then the caller logs it).
func (o *onceLog) first(key string) bool {
	if _, seen := o.seen.Load(key); seen {
		return false
	}
	if o.n.Add(1) <= maxCanaryLogged {
		if _, seen := o.seen.LoadOrStore(key, true); seen {
			return false
		}
	}
	return true
}
