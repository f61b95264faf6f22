package checkip

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// refusedByForward is the body of the router's model-api refusal.
const refusedByForward = `{"error":{"message":"refused by the router's model forward \"model\": DELETE /api/delete is not an inference call","type":"model_api_refused","forward":"model","reason":"x"}}`

// TestModelManagement: --model also tries a management call; refused by the forward is a
// pass, anything else reaching the server (an open forward) fails the check.
func TestModelManagement(t *testing.T) {
	models := `{"data":[{"id":"m"}]}`
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   Management
		pass   bool
	}{
		{"refused", http.StatusForbidden, refusedByForward, ManagementRefused, true},
		{"open: ollama answers", http.StatusNotFound, `{"error":"model 'x' not found"}`, ManagementOpen, false},
		{"open: another 403", http.StatusForbidden, `{"error":"forbidden"}`, ManagementOpen, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var saw string
			m := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/delete" {
					saw = r.Method
					w.WriteHeader(c.status)
					io.WriteString(w, c.body)
					return
				}
				io.WriteString(w, models)
			})
			opts := quiet(newServer(t, plainEcho).URL)
			opts.Model = m.URL
			d, _ := deps()
			rep := run(t, opts, d)
			if saw != http.MethodDelete {
				t.Errorf("the server saw %q on /api/delete; want DELETE", saw)
			}
			if rep.Model.Management != c.want || (rep.Model.Status == Pass) != c.pass {
				t.Errorf("management %q, status %v (%s); want %q, pass %v", rep.Model.Management, rep.Model.Status, rep.Model.Detail, c.want, c.pass)
			}
			if !c.pass && (rep.ExitCode() != ExitFail || !strings.Contains(rep.Model.Detail, "reached the model server")) {
				t.Errorf("exit %d, detail %q; want %d and the call named", rep.ExitCode(), rep.Model.Detail, ExitFail)
			}
		})
	}
}
