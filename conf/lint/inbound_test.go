package lint

import (
	"slices"
	"testing"

	"github.com/agentcage/router/conf"
)

// TestInbounds: an inbound on every address is an error; an inbound's address is local (a
// rule that proxies it is the trap); the members of a failover list are used proxies. The
// config is a Linux host's (vm_networks, which Windows refuses), so it is read and judged
// for Linux wherever the test runs (under Wine too).
func TestInbounds(t *testing.T) {
	src := `
[proxy.a]
address = "198.51.100.1:1080"
[proxy.b]
type = "http"
address = "198.51.100.1:3128"
[dns]
proxy = "a"
[capture]
vm_networks = ["172.30.16.0/20"]
[[inbound]]
name = "guests"
listen = "0.0.0.0:1080"
allow = ["172.30.16.0/20"]
unsafe_any_address = true
[[inbound]]
name = "web"
type = "http"
listen = "172.30.16.1:3128"
allow = ["172.30.16.0/20"]
[[rule]]
name = "to-inbound"
hosts = ["172.30.16.1"]
ports = [3128]
action = "proxy"
proxy = ["a", "b"]
[[rule]]
name = "vm"
caged = true
action = "proxy"
proxy = ["b", "a"]
[[rule]]
name = "default"
action = "direct"
`
	cfg, err := conf.Parse("t.toml", []byte(src), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	got := short(Check(cfg, Host{OS: "linux"}))
	want := []string{"error local-via-proxy to-inbound", "error inbound-any guests"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
