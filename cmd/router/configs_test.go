package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/rules/policy"
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
			checkLintsClean(t, "--os", tc.os, "--config", path)
			explainAs := func(flags []string) explainOut {
				t.Helper()
				return runExplainJSON(t, append([]string{"--config", path, "--os", tc.os}, flags...), policy.Env{})
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

// TestDocumentedExamples: every TOML block in README.md and docs/*.md is a config that
// parses (for Linux, or for Windows when Linux refuses it), so no example in the docs is out
// of date. Files the examples name (passwords, CA certificates) are stood in for.
func TestDocumentedExamples(t *testing.T) {
	block := regexp.MustCompile("(?s)```toml\n(.*?)```")
	caPEM := testCAPEM(t)
	opts := conf.Options{
		LookupEnv: func(string) (string, bool) { return "pw", true },
		ReadFile: func(name string) ([]byte, error) {
			if strings.HasSuffix(name, ".pem") {
				return caPEM, nil
			}
			if strings.HasSuffix(name, conf.DefaultApproved) {
				return nil, fs.ErrNotExist // no approval yet
			}
			return []byte("pw\n"), nil
		},
	}
	n := 0
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, doc := range append([]string{"../../README.md"}, docs...) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllSubmatch(data, -1) {
			n++
			name := fmt.Sprintf("%s#%d", filepath.Base(doc), i+1)
			o := opts
			o.OS = "linux"
			if _, err := conf.Parse(name, m[1], o); err != nil {
				o.OS = "windows"
				if _, werr := conf.Parse(name, m[1], o); werr != nil {
					t.Errorf("%s does not parse:\nlinux: %v\nwindows: %v\n%s", name, err, werr, m[1])
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("found %d TOML examples; the docs have more", n)
	}
}

// testCAPEM is a self-signed certificate, PEM encoded, for examples that name a CA file.
func testCAPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "example CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
