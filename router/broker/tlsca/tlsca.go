// Package tlsca is the router's own certificate authority, for the one place the router
// terminates a guest's TLS: a credential bound to an HTTPS destination with
// tls_terminate = true. The CA is made once per install and kept in the state directory
// (ca.pem, the certificate; ca-key.pem, its private key, mode 0600); the user installs the
// certificate in the guest. Leaf certificates for the names the router terminates are made
// from it on demand and cached.
//
// The private key never leaves the package: a CA prints as its subject only, and no error
// holds key bytes. A CA is safe for concurrent use. The package imports nothing of ours.
package tlsca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The files in the state directory.
const (
	CertFile = "ca.pem"
	KeyFile  = "ca-key.pem"
)

// maxLeaves bounds the cache of leaf certificates (one per name terminated: a handful).
const maxLeaves = 256

// leafLife is how long a leaf is valid; a cached leaf is made again past half of it.
const leafLife = 7 * 24 * time.Hour

// CA is the router's certificate authority.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	leafKey *ecdsa.PrivateKey // one key for every leaf: they all stand for this router
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// String names the CA by its subject, never its key.
func (c *CA) String() string { return "tlsca[" + c.cert.Subject.CommonName + "]" }

// Load reads the CA from dir; it fails (os.ErrNotExist among the wrapped errors) when the
// CA was never made.
func Load(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, fmt.Errorf("read the router's CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("read the router's CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("read the router's CA: %s holds no certificate", filepath.Join(dir, CertFile))
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("read the router's CA: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("read the router's CA key: %s holds no PEM block", filepath.Join(dir, KeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, errors.New("read the router's CA key: not a PKCS #8 private key")
	}
	key, ok := k.(crypto.Signer)
	if !ok || !publicEqual(key.Public(), cert.PublicKey) {
		return nil, errors.New("read the router's CA key: it does not match the certificate")
	}
	return newCA(cert, certPEM, key)
}

// LoadOrCreate loads the CA from dir, or makes it there when it was never made: a new
// ECDSA P-256 key (written 0600) and a self-signed certificate valid for ten years, for
// signing server certificates only (path length 0).
func LoadOrCreate(dir string) (*CA, error) {
	ca, err := Load(dir)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return ca, err
	}
	return create(dir, time.Now())
}

func create(dir string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: strings.TrimSpace("router local CA " + host), Organization: []string{"router (brokered credentials)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	// The key first, then the certificate: a certificate on disk always has its key.
	if err := writeFile(filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeFile(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("make the router's CA: %w", err)
	}
	return newCA(cert, certPEM, key)
}

func newCA(cert *x509.Certificate, certPEM []byte, key crypto.Signer) (*CA, error) {
	lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the leaf key: %w", err)
	}
	return &CA{cert: cert, certPEM: certPEM, key: key, leafKey: lk, now: time.Now, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM returns the CA's certificate, PEM-encoded: what the guest installs.
func (c *CA) CertPEM() []byte { return bytes.Clone(c.certPEM) }

// Pool returns a pool holding the CA's certificate (for clients in tests).
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// Leaf returns a server certificate for name (a host name, lower case), signed by the CA and
// cached; a cached one is made again past half of its life.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[name]; ok && now.Before(l.Leaf.NotBefore.Add(leafLife/2)) {
		return l, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, c.leafKey.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("make a certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("make a certificate for %s: %w", name, err)
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: c.leafKey, Leaf: leaf}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[name] = l
	return l, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func publicEqual(a, b crypto.PublicKey) bool {
	x, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && x.Equal(b)
}

// writeFile writes data to path with mode perm through a temporary file renamed in place,
// so that a reader never sees half a file.
func writeFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
