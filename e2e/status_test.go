//go:build linux

package e2e

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/control"
)

func refusalCount(st control.Status, reason string) (uint64, []control.Refused) {
	for _, r := range st.Refusals {
		if r.Reason == reason {
			return r.Count, r.Recent
		}
	}
	return 0, nil
}

// TestStatusCountsFlowsAndRefusals: after guest traffic of each kind, status shows a live
// flow's bytes, the ended flows' bytes under their rule, and every refusal under its
// reason with the right count and the latest destination: a block rule and an upstream
// that is down (the router: TCP, and UDP whose association fails), ICMP, the host's own
// ports and a forward's stranger (the kernel).
func TestStatusCountsFlowsAndRefusals(t *testing.T) {
	cfg := config(lab.GoSocksAddr, `proxy = "exit"

[proxy.down]
address = "198.51.100.1:1099"
`)
	cfg = strings.ReplaceAll(cfg, "action = \"proxy\"\n", "action = \"proxy\"\nproxy = \"exit\"\n")
	cfg = strings.Replace(cfg, "[[rule]]\nname = \"model-direct\"", `[[rule]]
name = "deny-8081"
ports = [8081]
action = "block"

[[rule]]
name = "via-down"
ports = [8082]
action = "proxy"
proxy = "down"

[[rule]]
name = "model-direct"`, 1)
	s := newScene(t, cfg)
	guest := s.lab.Guest()

	// A proxied flow that ends, then one held open with bytes sent.
	if out, code := s.curl(guest, lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("guest curl: exit %d, %q", code, out)
	}
	held, err := guest.Dial(s.ctx, "tcp", lab.ServiceAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := io.WriteString(held, "GET / HTTP/1.1\r\nHost: held\r\n"); err != nil { // not finished: the flow stays
		t.Fatal(err)
	}

	// Refused by the router: a block rule, and a proxy that is down (two tries each).
	for range 2 {
		s.curl(guest, "http://"+lab.ServiceAddr+":8081/")
		s.curl(guest, "http://"+lab.ServiceAddr+":8082/")
	}
	// Three UDP datagrams of one flow (the router takes them; the proxy carries no UDP),
	// then, refused by the kernel: three ICMP echo requests, one connection to the host's
	// own SSH port, two to the forward from an address it does not allow.
	udpProbe(t, s, guest)
	icmpProbe(t, guest)
	s.curl(guest, "http://"+lab.GatewayAddr+":22/", "--max-time", "2")
	if _, code := run(s.ctx, guest, "ip", "addr", "add", "10.0.2.16/24", "dev", lab.GuestDev); code != 0 {
		t.Fatal("second guest address")
	}
	for range 2 {
		s.curl(guest, "http://"+lab.GatewayAddr+":47831/v1/models", "--interface", "10.0.2.16", "--max-time", "2")
	}

	// The held flow's bytes are live: wait (bounded) until the relay moved them.
	var st control.Status
	_ = wait.Poll(5*time.Second, func() bool {
		st = s.status()
		return slices.ContainsFunc(st.Flows, func(f control.FlowStat) bool { return strings.HasSuffix(f.Dst, ":80") && f.Up > 0 })
	})
	out, _ := run(s.ctx, s.lab.Host(), routerBin, "status", "--config", s.cfg)
	t.Logf("router status:\n%s", out)

	var tcp []control.FlowStat // the TCP flows; the guest's UDP flow is live too
	for _, f := range st.Flows {
		if strings.HasSuffix(f.Dst, ":80") {
			tcp = append(tcp, f)
		}
	}
	if len(tcp) != 1 || tcp[0].Dst != lab.ServiceAddr+":80" || tcp[0].Rule != "vm" || tcp[0].Up != 28 || tcp[0].Via != "exit" {
		t.Errorf("live flows = %+v, want the held one to %s:80 by rule vm via exit with 28 bytes up", st.Flows, lab.ServiceAddr)
	}
	var vm *control.RuleStat
	for i := range st.Rules {
		if st.Rules[i].Name == "vm" {
			vm = &st.Rules[i]
		}
	}
	if vm == nil || vm.Hits < 2 || vm.Bytes < 28+100 {
		t.Errorf("rule vm = %+v, want 2 flows or more with the curl's and the held flow's bytes", vm)
	}
	if st.Totals.Up < 28 || st.Totals.Down < 50 || st.Totals.Flows < 6 {
		t.Errorf("totals = %+v", st.Totals)
	}
	want := []struct {
		reason string
		count  uint64
		dst    string
	}{
		{"rule", 2, lab.ServiceAddr + ":8081"},
		// Two TCP flows to 8082 through the dead proxy, then the guest's UDP flow (its
		// association with go-socks5 on 1080, which carries no UDP, fails): the latest.
		{"upstream-down", 3, lab.UDPEchoAddr},
		{"icmp", 3, lab.ServiceAddr + ":0"},
		{"host-off-limits", 1, lab.GatewayAddr + ":22"},
		{"forward-source", 2, lab.GatewayAddr + ":47831"},
	}
	var total uint64
	for _, w := range want {
		n, recent := refusalCount(st, w.reason)
		// A refused TCP connect may be retried by the client's kernel (a SYN resent before
		// the reset arrives): at least the count asked for, and not much more.
		if n < w.count || n > w.count+2 {
			t.Errorf("refusals %s = %d, want %d", w.reason, n, w.count)
		}
		if len(recent) == 0 || recent[0].Dst != w.dst {
			t.Errorf("refusals %s: latest %+v, want to %s", w.reason, recent, w.dst)
		}
		total += n
	}
	if st.Totals.Refused < total {
		t.Errorf("total refused %d < %d", st.Totals.Refused, total)
	}
	var down *control.UpstreamStat
	for i := range st.Upstreams {
		if st.Upstreams[i].Name == "down" {
			down = &st.Upstreams[i]
		}
	}
	if down == nil || down.State != "down" || down.LastError == "" {
		t.Errorf("upstreams = %+v, want down to be down with its error", st.Upstreams)
	}
}
