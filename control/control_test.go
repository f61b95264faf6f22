package control

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

type fakeHandler struct{}

func (fakeHandler) Status() Status {
	return Status{Config: "router.toml", Rules: []RuleStat{{Index: 1, Name: "vm", Action: "proxy", Proxy: "exit", Hits: 3}},
		Flows: []FlowStat{{ID: 7, Src: "10.0.2.15:40000", Dst: "198.18.0.1:443", Host: "api.example.com", Rule: "vm", Action: "proxy", Age: time.Second}}}
}

func (fakeHandler) NameFor(a netip.Addr) (string, bool, bool) {
	if a == netip.MustParseAddr("198.18.0.1") {
		return "api.example.com", true, true
	}
	return "", netip.MustParsePrefix("198.18.0.0/15").Contains(a), false
}

func TestRoundTrip(t *testing.T) {
	srv, cli := net.Pipe()
	go serveConn(srv, fakeHandler{}, nil)
	c := &Client{c: cli}
	c.sc = newScanner(cli)
	defer c.Close()
	r, err := c.Do(Request{Op: "name", Addr: netip.MustParseAddr("198.18.0.1")})
	if err != nil || r.Name != "api.example.com" || !r.Fake {
		t.Fatalf("name: %+v, %v", r, err)
	}
	r, err = c.Do(Request{Op: "name", Addr: netip.MustParseAddr("198.18.0.9")})
	if err == nil || !r.Fake {
		t.Fatalf("unknown pool address: %+v, %v", r, err)
	}
	r, err = c.Do(Request{Op: "status"})
	if err != nil || r.Status == nil || r.Status.Rules[0].Hits != 3 || r.Status.Flows[0].Host != "api.example.com" {
		t.Fatalf("status: %+v, %v", r, err)
	}
	if _, err := c.Do(Request{Op: "reboot"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("unknown op: %v", err)
	}
}
