package conf

import (
	"testing"
	"time"
)

// TestForwardIdleTimeout: an HTTP forward's idle_timeout defaults to
// DefaultForwardIdleTimeout, a raw one's to the relay's (0); a written one is kept.
func TestForwardIdleTimeout(t *testing.T) {
	cfg, err := Parse("f.toml", []byte(`
[[forward]]
listen = "10.0.2.2:47831"
connect = "127.0.0.1:47831"
allow = ["10.0.2.0/24"]
[[forward]]
listen = "10.0.2.2:47832"
connect = "127.0.0.1:47832"
allow = ["10.0.2.0/24"]
idle_timeout = "30s"
[[forward]]
listen = "10.0.2.2:47833"
connect = "127.0.0.1:47833"
allow = ["10.0.2.0/24"]
api = "tcp"
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{DefaultForwardIdleTimeout, 30 * time.Second, 0} {
		if got := cfg.Forwards[i].IdleTimeout; got != want {
			t.Errorf("forward %d: idle_timeout %v, want %v", i+1, got, want)
		}
	}
}
