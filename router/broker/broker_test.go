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
