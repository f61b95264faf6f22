package capturetest

import (
	_ "embed"
	"testing"

	"github.com/agentcage/router/conf"
)

// Parse reads a test's config as conf.Parse judges it for Linux, wherever the test runs (the
// tests' configs have VM networks, which Windows refuses), with every password_env set to
// "pw". An error fails t.
func Parse(t testing.TB, src string) *conf.Config {
	t.Helper()
	return parseFor(t, "linux", src)
}

// ParseWindows is Parse for a Windows config (cage subnets, hypervisor presets, services):
// it is judged for Windows wherever the test runs.
func ParseWindows(t testing.TB, src string) *conf.Config {
	t.Helper()
	return parseFor(t, "windows", src)
}

func parseFor(t testing.TB, os, src string) *conf.Config {
	t.Helper()
	cfg, err := conf.Parse("t.toml", []byte(src), conf.Options{OS: os, LookupEnv: func(string) (string, bool) { return "pw", true }})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Base is the smallest config of a caged VM that the daemon's and the platforms' tests
// start from: one SOCKS5 proxy "exit" (198.51.100.1:1080, user "u", password from P, no
// pipelining), the VM network 10.0.2.0/24, one forward (10.0.2.2:47831 to 127.0.0.1:47831)
// and one rule sending everything through the proxy. Tests append their own tables to it.
//
//go:embed testdata/base.toml
var Base string
