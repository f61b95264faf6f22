package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
)

// TestTrustedFiles: the files the Windows service refuses when non-administrators may
// change them include the rules' hosts files, the proxies' CA files and the approved
// rules file (when the config asks and it exists), besides the config and password files.
func TestTrustedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hosts := write("registries.txt", "registry.npmjs.org\n")
	ca := write("ca.pem", selfSigned(t))
	approved := write("approved.toml", "")
	cfgPath := write("router.toml", `
[proxy.exit]
type = "https"
address = "proxy.example.net:443"
ca_file = "`+filepath.ToSlash(ca)+`"
[policy]
unknown = "ask"
approved = "approved.toml"
[[rule]]
name = "npm"
caged = true
hosts_file = ["registries.txt"]
action = "proxy"
[[rule]]
name = "default"
action = "direct"
`)
	cfg, err := conf.Load(cfgPath, conf.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	got := trustedFiles(cfg)
	for _, want := range []string{cfgPath, hosts, approved} {
		if !slices.Contains(got, want) {
			t.Errorf("trustedFiles = %q, lacks %s", got, want)
		}
	}
	if !slices.ContainsFunc(got, func(p string) bool { return filepath.Base(p) == "ca.pem" }) {
		t.Errorf("trustedFiles = %q, lacks the CA file", got)
	}
}

// selfSigned returns a PEM certificate for a CA file.
func selfSigned(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
