package policy_test

import (
	_ "embed"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/rules/policy"
)

// namesConfig: a guest network with an allow-list by name, a name allowed on one port only,
// telemetry blocked, a name asked about, a name sent direct, the rest refused.
//
//go:embed testdata/names.toml
var namesConfig string

// TestRefusesName: a name is refused at the answer only when every flow of the source to it
// would be refused, on every port and both networks.
func TestRefusesName(t *testing.T) {
	p := compile(t, namesConfig)
	guest := netip.MustParseAddr("10.0.2.15")
	for _, tc := range []struct {
		src     netip.Addr
		name    string
		refused bool
		text    string // in RefusalText when refused
	}{
		{guest, "registry.npmjs.org", false, ""},
		{guest, "git.example", false, ""}, // allowed on port 22 only: it must resolve
		{guest, "telemetry.example", true, `rule #3 "telemetry" blocks it`},
		{guest, "a.telemetry.example", true, `rule #3 "telemetry" blocks it`},
		{guest, "new.example", false, ""},        // held under ask: the owner may allow it
		{guest, "intranet.corp.test", false, ""}, // direct by name: decided with its addresses
		{guest, "paste.example", true, `rule #6 "vm" blocks it`},
		{netip.MustParseAddr("192.0.2.77"), "telemetry.example", false, ""}, // not caged: not judged
	} {
		t.Run(tc.name+"/"+tc.src.String(), func(t *testing.T) {
			f := policy.Flow{Src: tc.src, Host: tc.name}
			d, refused := p.RefusesName(&f)
			if refused != tc.refused {
				t.Fatalf("RefusesName = %v (%+v), want %v", refused, d, tc.refused)
			}
			if refused && !strings.Contains(policy.RefusalText(d), tc.text) {
				t.Errorf("RefusalText = %q, want it to say %q", policy.RefusalText(d), tc.text)
			}
		})
	}
}
