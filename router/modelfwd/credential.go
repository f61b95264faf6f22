package modelfwd

import (
	"net/http"

	"github.com/agentcage/router/rules/refusal"
)

// credentials puts the brokered credentials bound to this forward in req's header, in place
// of their placeholders (the request goes to the forward's connect address, which the router
// dialed itself: never to a Host the guest wrote). A placeholder that must not go here (bound
// to another forward, held by another guest, or in the request target or Host) is a canary:
// the request is refused with a 403 and the connection closed, the refusal counted (canary)
// and logged once per forward, credential and source. It reports whether the request may go on.
func (h *modelHandler) credentials(w http.ResponseWriter, req *http.Request, path string) bool {
	if h.fw.Credentials.Empty() {
		return true
	}
	_, hit, found := h.fw.Credentials.Inject(req.Header, req.RequestURI+" "+req.Host, h.fw.Name, h.src.Addr())
	if !found {
		return true
	}
	h.refusedN.Add(1)
	h.s.book.Add(refusal.Canary, refusal.Event{Src: h.src, Dst: h.fw.Connect, Rule: "credential " + hit.Credential,
		Request: req.Method + " " + clip(path, 200)})
	if h.s.canaries.First(hit.Credential + " " + h.src.Addr().String() + " forward " + h.fw.Name) {
		h.log.Warn("canary: a request to the forward carried a credential's placeholder where it must not go; refused",
			"credential", hit.Credential, "where", hit.Where, "src", h.src, "method", clip(req.Method, 32), "path", clip(path, 200))
	}
	w.Header().Set("Connection", "close")
	writeJSONError(w, http.StatusForbidden, h.fw.Name, "a credential's placeholder where it must not go")
	return false
}
