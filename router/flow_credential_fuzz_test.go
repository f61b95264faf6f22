package router

import (
	"bufio"
	"bytes"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/httphead"
	"github.com/agentcage/router/internal/secret"
	"github.com/agentcage/router/router/broker"
)

// FuzzBrokerRequest: whatever bytes a guest sends on a flow to a brokered destination, the
// requests the router writes on (read by httphead.Read, judged by InjectTo, written by
// net/http) hold the real value only in the credential's own header of a request whose Host
// names the destination; never in a request target, a Host or another header.
func FuzzBrokerRequest(f *testing.F) {
	const (
		ph   = "router-placeholder-fuzz-0a0a"
		real = "REALVALUEfuzz"
		dest = "api.example.com:80"
	)
	f.Add([]byte("GET /v1 HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer " + ph + "\r\n\r\n"))
	f.Add([]byte("GET http://api.example.com/ HTTP/1.1\r\nHost: evil.example\r\nAuthorization: " + ph + "\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\nAuthorization: " + ph + "\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: api.example.com\r\nX-A: " + ph + "\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.0\r\nAuthorization: " + ph + "\r\n\r\n"))
	b := broker.New([]broker.Credential{{Name: "api", Placeholder: ph, Value: secret.NewPassword(real), Destination: dest, Header: "Authorization"}})
	src := netip.MustParseAddr("10.0.2.15")
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), maxBrokerHead)
		for range 8 {
			if _, err := br.Peek(1); err != nil {
				return
			}
			req, why, err := httphead.Read(br)
			if err != nil || why != "" {
				return
			}
			if _, _, found := b.InjectTo(req.Header, req.Host, req.RequestURI, dest, src); found {
				return
			}
			var out bytes.Buffer
			if err := req.Write(&out); err != nil {
				return
			}
			if !strings.Contains(out.String(), real) {
				continue
			}
			again, err := http.ReadRequest(bufio.NewReader(&out))
			if err != nil {
				t.Fatalf("the value went out in a request that does not parse back: %q", out.String())
			}
			if strings.Contains(again.RequestURI, real) || strings.Contains(again.Host, real) {
				t.Fatalf("the value in the target or Host: %q", out.String())
			}
			if !strings.EqualFold(strings.TrimSuffix(strings.TrimSuffix(again.Host, ":80"), "."), "api.example.com") {
				t.Fatalf("the value went to Host %q: %q", again.Host, out.String())
			}
			for k, vs := range again.Header {
				if k != "Authorization" && strings.Contains(strings.Join(vs, " "), real) {
					t.Fatalf("the value in header %s: %q", k, out.String())
				}
			}
		}
	})
}
