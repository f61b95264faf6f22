package router

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules"
)

// TestEarlyBytesGoWithTheRequest: what a client sends before the proxy connected rides with
// the pipelined SOCKS request, arrives once and in order, and counts in the flow's bytes.
func TestEarlyBytesGoWithTheRequest(t *testing.T) {
	for _, tt := range []struct {
		name     string
		creds    map[string]string
		pipeline bool
	}{
		{"pipelined", nil, true},
		{"pipelined with password", map[string]string{"agent": "pw-42"}, true},
		{"lock step", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			target := startTarget(t, "")
			p := startProxy(t, nil, tt.creds)
			up := UpstreamConfig{Config: upstream.Config{Name: "exit", Host: "127.0.0.1", Port: p.Addr.Port(), Pipeline: tt.pipeline}}
			if tt.creds != nil {
				up.Username, up.Password = "agent", "pw-42"
			}
			e := newEnv(t, Settings{Decision: mustRules(t, rules.Rule{Name: "all", Action: rules.Proxy, Proxy: "exit"}), Upstreams: []UpstreamConfig{up}}, Options{})
			c := e.dial(target)
			first := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
			more := strings.Repeat("y", 100<<10)
			if _, err := io.WriteString(c, first); err != nil {
				t.Fatal(err)
			}
			if got := readN(t, c, len(first)); got != first {
				t.Fatalf("echo of the first bytes = %q", got)
			}
			go io.WriteString(c, more)
			if got := readN(t, c, len(more)); got != more {
				t.Fatal("echo of the rest differs")
			}
			c.CloseWrite()
			if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
				t.Fatalf("after the echo: %q, %v", rest, err)
			}
			n := len(first) + len(more)
			e.waitLog(fmt.Sprintf("up=%d down=%d", n, n))
		})
	}
}
