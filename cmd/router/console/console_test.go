package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/router/control"
)

type fakeHandler struct {
	answered []string
}

func (*fakeHandler) Status() control.Status {
	return control.Status{Flows: []control.FlowStat{{ID: 1, Src: "10.0.2.15:40000", Dst: "198.51.100.1:443", Host: "example.com", Rule: "vm", Action: "proxy", Up: 10, Down: 2000}}}
}
func (*fakeHandler) NameFor(netip.Addr) (string, bool, bool) { return "", false, false }
func (*fakeHandler) Pending() []control.Prompt {
	return []control.Prompt{{ID: 7, Host: "new.example", Port: 443, Held: 2, Rule: "asked"}}
}
func (f *fakeHandler) Answer(id uint64, a, by string) (control.Prompt, error) {
	if id != 7 {
		return control.Prompt{}, errors.New("not pending")
	}
	f.answered = append(f.answered, a+" by "+by)
	return control.Prompt{ID: 7}, nil
}

var listen = netip.MustParseAddrPort("127.0.0.1:9478")

func newTest(unsafe bool) (*Server, *fakeHandler) {
	h := &fakeHandler{}
	return New(h, Options{Listen: listen, Unsafe: unsafe, Token: "secret-token",
		Caged: func(a netip.Addr) bool { return netip.MustParsePrefix("10.0.2.0/24").Contains(a) }}), h
}

type req struct {
	method, target, host, remote, cookie, csrf, body string
}

func (s *Server) do(r req) *httptest.ResponseRecorder {
	hr := httptest.NewRequest(r.method, r.target, strings.NewReader(r.body))
	hr.Host = r.host
	if hr.Host == "" {
		hr.Host = listen.String()
	}
	hr.RemoteAddr = r.remote
	if r.remote == "" {
		hr.RemoteAddr = "127.0.0.1:50000"
	}
	if r.cookie != "" {
		hr.AddCookie(&http.Cookie{Name: cookieName, Value: r.cookie})
	}
	if r.csrf != "" {
		hr.Header.Set("X-CSRF-Token", r.csrf)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, hr)
	return w
}

// TestLogin: the token URL gives a cookie and a redirect without the token; the page,
// the state and an answer with the CSRF token work with the cookie.
func TestLogin(t *testing.T) {
	s, h := newTest(false)
	w := s.do(req{method: "GET", target: "/?token=secret-token"})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/" {
		t.Fatalf("token URL: %d %v", w.Code, w.Header())
	}
	c := w.Result().Cookies()
	if len(c) != 1 || c[0].Value != "secret-token" || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie = %+v", c)
	}
	if w := s.do(req{method: "GET", target: "/", cookie: "secret-token"}); w.Code != 200 || !strings.Contains(w.Body.String(), "<title>router console") {
		t.Errorf("page: %d", w.Code)
	}
	if w := s.do(req{method: "GET", target: "/", host: "localhost:9478", cookie: "secret-token"}); w.Code != 200 {
		t.Errorf("page at localhost: %d", w.Code)
	}
	w = s.do(req{method: "GET", target: "/api/state", cookie: "secret-token"})
	var st State
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || len(st.Asks) != 1 || st.CSRF == "" || st.Status.Flows[0].Host != "example.com" {
		t.Fatalf("state: %d %v %+v", w.Code, err, st)
	}
	if strings.Contains(w.Body.String(), "secret-token") {
		t.Error("the state shows the token")
	}
	w = s.do(req{method: "POST", target: "/api/answer", cookie: "secret-token", csrf: st.CSRF, body: `{"id":7,"answer":"once"}`})
	if w.Code != 200 || len(h.answered) != 1 || !strings.HasPrefix(h.answered[0], "once by console 127.0.0.1") {
		t.Errorf("answer: %d %s %v", w.Code, w.Body, h.answered)
	}
}

// TestRefused: every way in but the right one is refused, and nothing is answered.
func TestRefused(t *testing.T) {
	s, h := newTest(false)
	st := State{}
	json.Unmarshal(s.do(req{method: "GET", target: "/api/state", cookie: "secret-token"}).Body.Bytes(), &st)
	answer := `{"id":7,"answer":"always"}`
	for _, c := range []struct {
		name string
		r    req
		code int
	}{
		{"foreign Host (DNS rebinding)", req{method: "GET", target: "/api/state", host: "evil.example:9478", cookie: "secret-token"}, 403},
		{"foreign Host, another port", req{method: "GET", target: "/api/state", host: "127.0.0.1:80", cookie: "secret-token"}, 403},
		{"no token", req{method: "GET", target: "/api/state"}, 401},
		{"no token, the page", req{method: "GET", target: "/"}, 401},
		{"wrong token", req{method: "GET", target: "/?token=guess"}, 403},
		{"wrong cookie", req{method: "GET", target: "/api/state", cookie: "guess"}, 401},
		{"answer without CSRF", req{method: "POST", target: "/api/answer", cookie: "secret-token", body: answer}, 403},
		{"answer with a forged CSRF", req{method: "POST", target: "/api/answer", cookie: "secret-token", csrf: "forged", body: answer}, 403},
		{"answer with the CSRF, no cookie", req{method: "POST", target: "/api/answer", csrf: st.CSRF, body: answer}, 401},
		{"answer by GET", req{method: "GET", target: "/api/answer?id=7&answer=always", cookie: "secret-token", csrf: st.CSRF}, 405},
		{"from a caged source", req{method: "GET", target: "/?token=secret-token", remote: "10.0.2.15:40000"}, 403},
		{"from another machine", req{method: "GET", target: "/api/state", remote: "192.168.1.20:40000", cookie: "secret-token"}, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := s.do(c.r)
			if w.Code != c.code {
				t.Errorf("%d %q, want %d", w.Code, w.Body, c.code)
			}
			if len(w.Result().Cookies()) != 0 {
				t.Error("a cookie was given")
			}
		})
	}
	if len(h.answered) != 0 {
		t.Errorf("answered: %v", h.answered)
	}
	// unsafe_listen lets another machine in, never a caged source.
	s, _ = newTest(true)
	if w := s.do(req{method: "GET", target: "/api/state", remote: "192.168.1.20:40000", cookie: "secret-token"}); w.Code != 200 {
		t.Errorf("unsafe, another machine: %d", w.Code)
	}
	if w := s.do(req{method: "GET", target: "/api/state", remote: "10.0.2.15:40000", cookie: "secret-token"}); w.Code != 403 {
		t.Errorf("unsafe, a caged source: %d", w.Code)
	}
}
