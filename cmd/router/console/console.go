// Package console is the router's web console: the live flows, the refusals by reason, the
// upstreams' health, the rules with their hits, and the pending ask prompts with their
// buttons, served from the binary (embed: no CDN, no build step) on this host's loopback.
//
// It is an administrator's tool, and guarded as one:
//
//   - a secret token made at start: the URL `router console` prints carries it once
//     (/?token=...), which is traded for a cookie (HttpOnly, SameSite=Strict) and a
//     redirect to a URL without it; every other request needs the cookie;
//   - the Host header must name the console's own address (or localhost at its port), so
//     a page of another site cannot reach it through a name it rebinds to 127.0.0.1;
//   - every change (POST /api/answer) carries a CSRF token in a header, which only a page
//     that can read /api/state (same origin, with the cookie) learns;
//   - a client from another machine, or from a caged source (a VM network), is refused,
//     unless Options.Unsafe ([console] unsafe_listen) lets other machines in; a caged
//     source is refused even then.
//
// Nothing secret is served: the status has no password, and the token is compared in
// constant time and never logged.
package console

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/router/control"
)

//go:embed static
var static embed.FS

// Handler is what the console shows and answers: the daemon's control handler.
type Handler interface {
	control.Handler
	control.Asker
}

// Options configure a Server.
type Options struct {
	// Listen is the address the console is served on (its Host header's).
	Listen netip.AddrPort
	// Unsafe lets clients of other machines in ([console] unsafe_listen).
	Unsafe bool
	// Caged reports whether a client's address is a caged source (a VM network): always
	// refused. Nil: none is.
	Caged func(netip.Addr) bool
	Log   *slog.Logger
	// Token is the secret of the URL; empty: one is made.
	Token string
}

// Server is the console's HTTP handler.
type Server struct {
	h    Handler
	opts Options
	csrf string
	mux  *http.ServeMux
}

const cookieName = "router_console"

// New returns a console for h.
func New(h Handler, opts Options) *Server {
	if opts.Token == "" {
		opts.Token = randomHex()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{h: h, opts: opts, csrf: randomHex(), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /console.js", s.file("static/console.js", "text/javascript; charset=utf-8"))
	s.mux.HandleFunc("GET /console.css", s.file("static/console.css", "text/css; charset=utf-8"))
	s.mux.HandleFunc("GET /api/state", s.state)
	s.mux.HandleFunc("POST /api/answer", s.answer)
	return s
}

func randomHex() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// URL is the address to open: it carries the token once.
func (s *Server) URL() string {
	return "http://" + s.opts.Listen.String() + "/?token=" + s.opts.Token
}

// ServeHTTP checks who asks (client, Host, cookie) before any route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'none'; base-uri 'none'")
	if why := s.refuse(r); why != "" {
		s.opts.Log.Debug("console request refused", "remote", r.RemoteAddr, "why", why)
		http.Error(w, why, http.StatusForbidden)
		return
	}
	if tok := r.URL.Query().Get("token"); tok != "" && r.Method == http.MethodGet && r.URL.Path == "/" {
		if !equal(tok, s.opts.Token) {
			http.Error(w, "bad token", http.StatusForbidden)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.opts.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if c, err := r.Cookie(cookieName); err != nil || !equal(c.Value, s.opts.Token) {
		http.Error(w, "open the URL `router console` prints (it carries the console's token)", http.StatusUnauthorized)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// refuse says why r may not be served at all, "" when it may.
func (s *Server) refuse(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "unknown client"
	}
	a := ap.Addr().Unmap()
	if s.opts.Caged != nil && s.opts.Caged(a) {
		return "a caged source may not use the console"
	}
	if !a.IsLoopback() && !s.opts.Unsafe {
		return "the console serves this host only"
	}
	if !s.hostOK(r.Host) {
		return "wrong Host"
	}
	return ""
}

// hostOK reports whether host (a Host header) names the console: its listen address and
// port, or localhost at its port.
func (s *Server) hostOK(host string) bool {
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != strconv.Itoa(int(s.opts.Listen.Port())) {
		return false
	}
	if strings.EqualFold(h, "localhost") && s.opts.Listen.Addr().IsLoopback() {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap() == s.opts.Listen.Addr().Unmap()
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	s.file("static/index.html", "text/html; charset=utf-8")(w, r)
}

func (s *Server) file(name, ctype string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := static.ReadFile(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Write(b)
	}
}

// State is what /api/state returns: the status, the pending prompts and the CSRF token.
type State struct {
	Now    time.Time        `json:"now"`
	Status control.Status   `json:"status"`
	Asks   []control.Prompt `json:"asks"`
	CSRF   string           `json:"csrf"`
}

func (s *Server) state(w http.ResponseWriter, r *http.Request) {
	st := State{Now: time.Now(), Status: s.h.Status(), Asks: s.h.Pending(), CSRF: s.csrf}
	if st.Asks == nil {
		st.Asks = []control.Prompt{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	if !equal(r.Header.Get("X-CSRF-Token"), s.csrf) {
		http.Error(w, "bad CSRF token", http.StatusForbidden)
		return
	}
	var req struct {
		ID     uint64 `json:"id"`
		Answer string `json:"answer"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	p, err := s.h.Answer(req.ID, req.Answer, "console "+r.RemoteAddr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	s.opts.Log.Info("console answered", "id", p.ID, "host", p.Host, "port", p.Port, "answer", req.Answer, "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(p)
}
