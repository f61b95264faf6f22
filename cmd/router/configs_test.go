package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/policy"
)

// TestShippedConfigs: every host setup the README points at lints clean on its OS, and
// explain sends a guest's flow through the proxy and the model port direct.
func TestShippedConfigs(t *testing.T) {
	for _, tc := range []struct {
		file, os string
		guest    []string // explain flags of a guest's flow to the internet
		model    []string // explain flags of the guest's call to the model
	}{
		{"virtualbox.toml", "windows",
			[]string{"--app", "VirtualBoxVM.exe", "--dst", "203.0.113.10:443"},
			[]string{"--app", "VirtualBoxVM.exe", "--src", "127.0.0.1", "--dst", "127.0.0.1:47831"}},
		{"windows-vmware-nat.toml", "windows",
			[]string{"--app", "vmnat.exe", "--dst", "api.example.com:443"},
			[]string{"--src", "192.168.150.128", "--dst", "192.168.150.1:47831"}},
		{"windows-hyperv-internal.toml", "windows",
			[]string{"--src", "192.168.200.10", "--dst", "203.0.113.10:443"},
			[]string{"--src", "192.168.200.10", "--dst", "192.168.200.1:47831"}},
		{"linux-libvirt.toml", "linux",
			[]string{"--src", "192.168.122.50", "--dst", "203.0.113.10:443"},
			[]string{"--src", "192.168.122.50", "--dst", "192.168.122.1:47831"}},
		{"linux-virtualbox-nat.toml", "linux",
			[]string{"--app", "VBoxHeadless", "--dst", "203.0.113.10:443"},
			[]string{"--src", "192.168.56.101", "--dst", "192.168.56.1:47831"}},
		{"linux-virtualbox-hostonly.toml", "linux",
			[]string{"--src", "192.168.56.101", "--dst", "203.0.113.10:443"},
			[]string{"--src", "192.168.56.101", "--dst", "192.168.56.1:47831"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("../../testdata/conf", tc.file)
			out, _, code := run(t, "lint", "--os", tc.os, "--config", path)
			if code != exitOK || !strings.Contains(out, "0 errors, 0 warnings") {
				t.Errorf("lint: exit %d\n%s", code, out)
			}
			explainAs := func(flags []string) explainOut {
				t.Helper()
				var stdout, stderr bytes.Buffer
				args := append([]string{"--config", path, "--os", tc.os, "--json"}, flags...)
				if code := explain(args, &stdout, &stderr, policy.Env{}); code != exitOK {
					t.Fatalf("explain %q: exit %d: %s", flags, code, stderr.String())
				}
				var o explainOut
				if err := json.Unmarshal(stdout.Bytes(), &o); err != nil {
					t.Fatal(err)
				}
				return o
			}
			if o := explainAs(tc.guest); !o.Caged || o.Verdict.Action != "proxy" || o.Verdict.Proxy != "exit" {
				t.Errorf("the guest's flow %q: %+v (caged %v), want caged and proxied via exit", tc.guest, o.Verdict, o.Caged)
			}
			if o := explainAs(tc.model); o.Verdict.Action != "direct" {
				t.Errorf("the model %q: %+v, want direct", tc.model, o.Verdict)
			}
		})
	}
}
