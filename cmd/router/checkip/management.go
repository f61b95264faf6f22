package checkip

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Management is what a management call through the model endpoint got.
type Management string

const (
	ManagementRefused Management = "refused" // the router's forward refused it (403, model_api_refused)
	ManagementOpen    Management = "open"    // something else answered: the call reached the server
	ManagementUnknown Management = "unknown" // no answer (the endpoint is down or the call failed)
)

// ManagementProbe is the call tried: deleting a model that does not exist. On an Ollama
// server behind an open forward it answers 404 and changes nothing; a forward that knows
// the model API refuses it before the server sees it.
const ManagementProbe = `DELETE /api/delete {"model":"router-check-ip-probe/none:absent"}`

// management tries ManagementProbe at the model endpoint's origin (modelURL's scheme and
// host) and says whether the forward refused it, with a sentence for the report.
func (r *runner) management(ctx context.Context, modelURL string) (Management, string) {
	u, err := url.Parse(modelURL)
	if err != nil {
		return ManagementUnknown, err.Error()
	}
	target := u.Scheme + "://" + u.Host + "/api/delete"
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, target, strings.NewReader(`{"model":"router-check-ip-probe/none:absent"}`))
	if err != nil {
		return ManagementUnknown, err.Error()
	}
	req.Header.Set("User-Agent", "router-check-ip")
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return ManagementUnknown, fmt.Sprintf("DELETE %s: %s", target, r.describe(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var refusal struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if resp.StatusCode == http.StatusForbidden && json.Unmarshal(body, &refusal) == nil && refusal.Error.Type == "model_api_refused" {
		return ManagementRefused, "a management call (DELETE /api/delete) was refused by the forward"
	}
	return ManagementOpen, fmt.Sprintf("a management call (DELETE /api/delete) reached the model server (HTTP %d): the forward passes management calls, so the guest can make the host pull, push or create models", resp.StatusCode)
}
