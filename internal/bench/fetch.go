package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	randv2 "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SelfSigned returns a fresh self-signed ECDSA P-256 certificate for name and ips, valid for a
// day, and its key, both PEM-encoded: the lab's HTTPS server presents it and the clients
// trust it (and nothing else).
func SelfSigned(name string, ips ...netip.Addr) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed: certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// FilePath is the path of the file server's answer of n bytes.
func FilePath(n int) string { return "/bytes/" + strconv.Itoa(n) }

// FileServer is an HTTPS server of made-up files, a package registry's stand-in: GET
// FilePath(n) answers n bytes (Content-Length set). It offers no session tickets and no
// keep-alive, so every fetch is a fresh TCP connection and a full TLS handshake, and it
// closes first (TIME_WAIT stays on its side, as with Sink).
type FileServer struct {
	srv *http.Server
}

// NewFileServer returns a FileServer presenting the PEM certificate and key.
func NewFileServer(certPEM, keyPEM []byte) (*FileServer, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("file server: %w", err)
	}
	buf := NewSink().buf
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n > 1<<30 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Header().Set("Content-Type", "application/octet-stream")
		for n > 0 {
			m, err := w.Write(buf[:min(n, len(buf))])
			if err != nil {
				return
			}
			n -= m
		}
	})
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: true, NextProtos: []string{"http/1.1"}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	srv.SetKeepAlivesEnabled(false)
	return &FileServer{srv: srv}, nil
}

// Serve serves HTTPS on ln until Close; it then returns nil.
func (s *FileServer) Serve(ln net.Listener) error {
	err := s.srv.Serve(tls.NewListener(ln, s.srv.TLSConfig))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the server.
func (s *FileServer) Close() error { return s.srv.Close() }

// FetchSizes is the sizes of a burst of n fetches: log-uniform from lo to hi bytes (more
// small files than large, as a package manager's), drawn from a generator seeded with
// seed, so that every row of a run fetches the same files in the same order.
func FetchSizes(n, lo, hi int, seed uint64) []int {
	rng := randv2.New(randv2.NewPCG(seed, 27))
	sizes := make([]int, n)
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	for i := range sizes {
		sizes[i] = min(hi, max(lo, int(math.Exp(l+rng.Float64()*(h-l)))))
	}
	return sizes
}

// FetchResult is a burst of HTTPS fetches.
type FetchResult struct {
	Count   int     `json:"count"`
	Errors  int     `json:"errors"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"` // the burst's wall time
	// Per fetch, from the request (before its connect) to the body's last byte, in ms.
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	// FirstError describes the first failure, if any.
	FirstError string `json:"first_error,omitempty"`
}

// Fetch fetches FilePath(size) for every size over HTTPS from the FileServer at target
// (dialed with d: a literal ip:port), par at a time, each on a new connection with a full
// handshake: no keep-alive and no session cache. The client trusts only caPEM and asks for
// name (SNI and Host). A fetch whose body is not exactly its size is an error, counted and
// not retried.
func Fetch(ctx context.Context, d Dialer, target, name string, caPEM []byte, sizes []int, par int) (FetchResult, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return FetchResult{}, errors.New("fetch: no certificate in the CA file")
	}
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return d.Dial(ctx, target) },
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: name},
		DisableKeepAlives: true,
		// No compression: the bytes asked for are the bytes carried.
		DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	lat := make([]time.Duration, len(sizes))
	var next atomic.Int64
	var errs atomic.Int64
	var got atomic.Int64
	var firstErr atomic.Pointer[string]
	fail := func(i int, err error) {
		errs.Add(1)
		s := fmt.Sprintf("fetch %d: %v", i, err)
		firstErr.CompareAndSwap(nil, &s)
		lat[i] = -1
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(sizes) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+name+FilePath(sizes[i]), nil)
				if err != nil {
					fail(i, err)
					continue
				}
				resp, err := client.Do(req)
				if err != nil {
					fail(i, err)
					continue
				}
				n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				got.Add(n)
				switch {
				case err != nil:
					fail(i, err)
				case resp.StatusCode != http.StatusOK || n != int64(sizes[i]):
					fail(i, fmt.Errorf("%s, %d of %d bytes", resp.Status, n, sizes[i]))
				default:
					lat[i] = time.Since(t0)
				}
			}
		})
	}
	wg.Wait()
	res := FetchResult{Count: len(sizes), Errors: int(errs.Load()), Bytes: got.Load(), Seconds: time.Since(start).Seconds()}
	if p := firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	ok := slices.DeleteFunc(lat, func(d time.Duration) bool { return d <= 0 })
	res.P50, res.P99 = ms(quantile(ok, 0.50)), ms(quantile(ok, 0.99))
	return res, ctx.Err()
}

// quantile is the q-quantile of xs (sorted here), 0 when xs is empty.
func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// trimData is an event's payload: the line without "data: " and the line end.
func trimData(line string) (string, bool) {
	return strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
}
