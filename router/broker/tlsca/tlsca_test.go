package tlsca

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/winetest"
)

// TestLoadOrCreate: the CA is made once (the key 0600), loaded the same afterwards, and its
// leaves verify for their name against it, and for no other.
func TestLoadOrCreate(t *testing.T) {
	dir := winetest.TempDir(t)
	ca, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		st, err := os.Stat(filepath.Join(dir, KeyFile))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("the key file: %v, %v; want mode 0600", st, err)
		}
	}
	again, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca.CertPEM(), again.CertPEM()) {
		t.Error("a second LoadOrCreate made another CA")
	}
	leaf, err := again.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if l2, _ := again.Leaf("api.example.com"); l2 != leaf {
		t.Error("the leaf was not cached")
	}
	opts := x509.VerifyOptions{Roots: ca.Pool(), DNSName: "api.example.com", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := leaf.Leaf.Verify(opts); err != nil {
		t.Errorf("the leaf does not verify against the CA: %v", err)
	}
	opts.DNSName = "other.example.com"
	if _, err := leaf.Leaf.Verify(opts); err == nil {
		t.Error("the leaf verifies for another name")
	}
	key, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	for _, s := range []string{fmt.Sprint(ca), fmt.Sprintf("%v", ca), ca.String()} {
		if strings.Contains(s, "PRIVATE") || strings.Contains(s, string(key[30:60])) {
			t.Errorf("the CA printed its key: %s", s)
		}
	}
}

// TestLoadRefusesAMismatchedKey: a key that is not the certificate's is refused.
func TestLoadRefusesAMismatchedKey(t *testing.T) {
	a, b := winetest.TempDir(t), winetest.TempDir(t)
	if _, err := LoadOrCreate(a); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(b); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(filepath.Join(b, KeyFile))
	if err := os.WriteFile(filepath.Join(a, KeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(a); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Load with another CA's key: %v", err)
	}
}
