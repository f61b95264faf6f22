package broker

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/secret"
)

const (
	openaiPH = "sk-router-placeholder-openai-1f3a"
	otherPH  = "router-placeholder-github-77aa"
	realKey  = "sk-REAL-VALUE-never-shown"
)

func broker() *Broker {
	return New([]Credential{
		{Name: "openai", Placeholder: openaiPH, Value: secret.NewPassword(realKey), Forward: "model",
			Guests: []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24")}},
		{Name: "github", Placeholder: otherPH, Value: secret.NewPassword("ghp_real"), Forward: "git"},
	})
}

// TestInject: the value goes in place of its placeholder only in a request to its own
// forward from its own guests; anywhere else the placeholder is a canary and nothing changes.
func TestInject(t *testing.T) {
	guest, other := netip.MustParseAddr("10.0.2.15"), netip.MustParseAddr("10.0.3.15")
	for _, tc := range []struct {
		name     string
		header   string // Authorization
		target   string
		forward  string
		src      netip.Addr
		wantAuth string // "" when a hit is wanted
		wantHit  string
	}{
		{"bound forward, own guest", "Bearer " + openaiPH, "/v1/chat/completions", "model", guest, "Bearer " + realKey, ""},
		{"no placeholder", "Bearer x", "/v1/models", "model", guest, "Bearer x", ""},
		{"another forward", "Bearer " + openaiPH, "/v1/chat/completions", "git", guest, "", "openai"},
		{"another guest", "Bearer " + openaiPH, "/v1/chat/completions", "model", other, "", "openai"},
		{"in the URL", "Bearer x", "/v1/models?key=" + openaiPH, "model", guest, "", "openai"},
		{"another credential's placeholder", "Bearer " + otherPH, "/", "model", guest, "", "github"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Authorization": {tc.header}}
			n, hit, found := broker().Inject(h, tc.target, tc.forward, tc.src)
			if tc.wantHit != "" {
				if !found || hit.Credential != tc.wantHit || n != 0 || h.Get("Authorization") != tc.header {
					t.Errorf("Inject = %d, %+v, %v, header %q; want a hit on %s and the header unchanged", n, hit, found, h.Get("Authorization"), tc.wantHit)
				}
				return
			}
			if found || h.Get("Authorization") != tc.wantAuth {
				t.Errorf("Inject = %d, %+v, %v, header %q; want %q", n, hit, found, h.Get("Authorization"), tc.wantAuth)
			}
		})
	}
}

// TestFindName: a placeholder in a name is found whatever its case, and split into labels.
func TestFindName(t *testing.T) {
	b := broker()
	for _, tc := range []struct {
		name string
		hit  bool
	}{
		{strings.ToUpper(openaiPH) + ".attacker.example", true},
		{"sk-router-placeholder.openai-1f3a.attacker.example", true},
		{"skrouterplaceholderopenai1f3a.x.example", true},
		{"registry.npmjs.org", false},
		{"", false},
	} {
		if _, got := b.FindName(tc.name, "dns name"); got != tc.hit {
			t.Errorf("FindName(%q) = %v, want %v", tc.name, got, tc.hit)
		}
	}
	if _, got := b.Find([]byte("GET /log?token="+openaiPH+" HTTP/1.1\r\n"), "http request"); !got {
		t.Error("Find missed a placeholder in a request line")
	}
	if _, got := (*Broker)(nil).FindName(openaiPH, "dns"); got {
		t.Error("a nil Broker found something")
	}
}

// TestNeverPrintsValues: a Broker and its credentials print no value.
func TestNeverPrintsValues(t *testing.T) {
	b := broker()
	for _, s := range []string{fmt.Sprintf("%v", b), fmt.Sprintf("%+v", b.creds), fmt.Sprintf("%#v", b.creds[0])} {
		if strings.Contains(s, realKey) {
			t.Errorf("printed the value: %s", s)
		}
	}
}

func FuzzFindName(f *testing.F) {
	f.Add("sk-router-placeholder-openai-1f3a.example")
	f.Add("a.b.c")
	b := broker()
	f.Fuzz(func(t *testing.T, name string) {
		hit, found := b.FindName(name, "dns")
		if found && hit.Credential == "" {
			t.Fatal("a hit without a credential")
		}
	})
}

// destBroker holds a credential bound to a destination (its value only in Authorization),
// one bound to a destination in any header, and the forward's.
func destBroker() *Broker {
	return New([]Credential{
		{Name: "api", Placeholder: apiPH, Value: secret.NewPassword(apiKey), Destination: "api.example.com:80", Header: "Authorization",
			Guests: []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24")}},
		{Name: "alt", Placeholder: altPH, Value: secret.NewPassword("alt-real"), Destination: "alt.example.com:8080"},
		{Name: "openai", Placeholder: openaiPH, Value: secret.NewPassword(realKey), Forward: "model"},
		{Name: "tls", Placeholder: tlsPH, Value: secret.NewPassword("tls-real"), Destination: "secure.example.com:443", TLSTerminate: true},
		{Name: "plain443", Placeholder: plainPH, Value: secret.NewPassword("plain-real"), Destination: "plain.example.com:443"},
	})
}

const (
	apiPH   = "router-placeholder-api-0001"
	altPH   = "router-placeholder-alt-0002"
	apiKey  = "api-REAL-key"
	tlsPH   = "router-placeholder-tls-0003"
	plainPH = "router-placeholder-plain-0004"
)

// injectCases is the decision for a request on a connection the router dialed to dest:
// where the value goes, and where a placeholder is a canary (hit names the credential).
var injectCases = []struct {
	name    string
	dest    string
	host    string
	target  string
	header  string // "Key: value"
	src     string
	want    string // the header's value after; "" when a hit is wanted
	wantHit string
}{
	{"bound, its header", "api.example.com:80", "api.example.com", "/v1", "Authorization: Bearer " + apiPH, "10.0.2.15", "Bearer " + apiKey, ""},
	{"bound, Host with port 80 and a dot", "api.example.com:80", "API.example.com.:80", "/v1", "Authorization: Bearer " + apiPH, "10.0.2.15", "Bearer " + apiKey, ""},
	{"no placeholder", "api.example.com:80", "api.example.com", "/v1", "Authorization: Bearer x", "10.0.2.15", "Bearer x", ""},
	{"no placeholder, Host elsewhere", "api.example.com:80", "attacker.example", "/", "Authorization: Bearer x", "10.0.2.15", "Bearer x", ""},
	{"another header than its own", "api.example.com:80", "api.example.com", "/v1", "X-Api-Key: " + apiPH, "10.0.2.15", "", "api"},
	{"in the query", "api.example.com:80", "api.example.com", "/v1?key=" + apiPH, "Authorization: Bearer x", "10.0.2.15", "", "api"},
	{"in the Host", "api.example.com:80", apiPH + ".api.example.com", "/", "Authorization: Bearer x", "10.0.2.15", "", "api"},
	{"Host names another site (a shared front)", "api.example.com:80", "attacker.example", "/", "Authorization: Bearer " + apiPH, "10.0.2.15", "", "api"},
	{"Host names the API at another port", "api.example.com:80", "api.example.com:8080", "/", "Authorization: Bearer " + apiPH, "10.0.2.15", "", "api"},
	{"no Host", "api.example.com:80", "", "/", "Authorization: Bearer " + apiPH, "10.0.2.15", "", "api"},
	{"another destination", "attacker.example:80", "attacker.example", "/", "Authorization: Bearer " + apiPH, "10.0.2.15", "", "api"},
	{"the API's name at another port", "api.example.com:8080", "api.example.com:8080", "/", "Authorization: Bearer " + apiPH, "10.0.2.15", "", "api"},
	{"another guest", "api.example.com:80", "api.example.com", "/", "Authorization: Bearer " + apiPH, "10.0.3.15", "", "api"},
	{"a forward's credential", "api.example.com:80", "api.example.com", "/", "Authorization: Bearer " + openaiPH, "10.0.2.15", "", "openai"},
	{"any header, port in Host", "alt.example.com:8080", "alt.example.com:8080", "/", "X-Token: " + altPH, "10.0.3.15", "alt-real", ""},
	{"port 8080 left out of Host", "alt.example.com:8080", "alt.example.com", "/", "X-Token: " + altPH, "10.0.3.15", "", "alt"},
	{"TLS terminated, 443 left out of Host", "secure.example.com:443", "secure.example.com", "/", "Authorization: " + tlsPH, "10.0.2.15", "tls-real", ""},
	{"TLS terminated, 443 in Host", "secure.example.com:443", "secure.example.com:443", "/", "Authorization: " + tlsPH, "10.0.2.15", "tls-real", ""},
	{"TLS terminated, Host says 80", "secure.example.com:443", "secure.example.com:80", "/", "Authorization: " + tlsPH, "10.0.2.15", "", "tls"},
	{"plaintext on 443, port left out of Host", "plain.example.com:443", "plain.example.com", "/", "Authorization: " + plainPH, "10.0.2.15", "", "plain443"},
}

// TestInjectTo: the value goes in place of its placeholder only in its own header of a
// request on a connection to its own destination whose Host names it, from its guests;
// anywhere else the placeholder is a canary and nothing changes.
func TestInjectTo(t *testing.T) {
	b := destBroker()
	for _, tc := range injectCases {
		t.Run(tc.name, func(t *testing.T) {
			key, val, _ := strings.Cut(tc.header, ": ")
			h := http.Header{key: {val}}
			n, hit, found := b.InjectTo(h, tc.host, tc.target, tc.dest, netip.MustParseAddr(tc.src))
			if tc.wantHit != "" {
				if !found || hit.Credential != tc.wantHit || n != 0 || h.Get(key) != val {
					t.Errorf("InjectTo = %d, %+v, %v, header %q; want a hit on %s and the header unchanged", n, hit, found, h.Get(key), tc.wantHit)
				}
				return
			}
			if found || h.Get(key) != tc.want {
				t.Errorf("InjectTo = %d, %+v, %v, header %q; want %q", n, hit, found, h.Get(key), tc.want)
			}
		})
	}
}

// TestBinds: only a destination's exact name and port is bound; a forward's credential binds
// no destination.
func TestBinds(t *testing.T) {
	b := destBroker()
	for dest, want := range map[string]bool{"api.example.com:80": true, "alt.example.com:8080": true, "api.example.com:443": false, "x.api.example.com:80": false, ":80": false, "": false} {
		if got := b.Binds(dest); got != want {
			t.Errorf("Binds(%q) = %v, want %v", dest, got, want)
		}
	}
	if (*Broker)(nil).Binds("api.example.com:80") {
		t.Error("a nil Broker binds a destination")
	}
}

// TestForwardHeader: a forward's credential with a header gets its value only there.
func TestForwardHeader(t *testing.T) {
	b := New([]Credential{{Name: "m", Placeholder: openaiPH, Value: secret.NewPassword(realKey), Forward: "model", Header: "X-Api-Key"}})
	h := http.Header{"Authorization": {"Bearer " + openaiPH}}
	if _, hit, found := b.Inject(h, "/", "model", netip.MustParseAddr("10.0.2.15")); !found || hit.Credential != "m" {
		t.Errorf("the placeholder in Authorization: %+v %v, want a hit", hit, found)
	}
	h = http.Header{"X-Api-Key": {openaiPH}}
	if n, _, found := b.Inject(h, "/", "model", netip.MustParseAddr("10.0.2.15")); found || n != 1 || h.Get("X-Api-Key") != realKey {
		t.Errorf("the placeholder in X-Api-Key: %d %v %q", n, found, h.Get("X-Api-Key"))
	}
}
