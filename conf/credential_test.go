package conf

import "testing"

// TestCredentialDestination: a credential bound to a destination keeps its name in lower
// case without a trailing dot, and its header in canonical form.
func TestCredentialDestination(t *testing.T) {
	data := []byte(`
[[credential]]
name = "api"
placeholder = "router-placeholder-api-0001"
value_env = "API_KEY"
destination = "API.Example.com.:8080"
header = "authorization"
guests = ["10.0.2.0/24"]
`)
	env := func(k string) (string, bool) { return "real-" + k, k == "API_KEY" }
	cfg, err := Parse("c.toml", data, Options{LookupEnv: env, OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Credentials) != 1 {
		t.Fatalf("credentials: %+v", cfg.Credentials)
	}
	c := cfg.Credentials[0]
	if c.Destination != "api.example.com:8080" || c.Header != "Authorization" || c.Forward != "" || c.Value.Reveal() != "real-API_KEY" {
		t.Errorf("credential = destination %q header %q forward %q", c.Destination, c.Header, c.Forward)
	}
}
