//go:build linux

package e2e

import (
	"embed"
	"os"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

// fixtures are the scenes' configs and rules that are not the scene's own (config), as
// TOML files.
//
//go:embed testdata/*.toml
var fixtures embed.FS

// fixture is testdata/name with each ${X} set to the lab's address X (GoSocksAddr,
// EchoName, SecondGatewayAddr, SecondGuestNetwork). A file that is missing, or that names
// another address, fails the test.
func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := fixtures.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{"GoSocksAddr": lab.GoSocksAddr, "EchoName": lab.EchoName,
		"SecondGatewayAddr": lab.SecondGatewayAddr, "SecondGuestNetwork": lab.SecondGuestNetwork}
	return os.Expand(string(b), func(x string) string {
		a, ok := addrs[x]
		if !ok {
			t.Fatalf("testdata/%s: ${%s} is no lab address", name, x)
		}
		return a
	})
}
