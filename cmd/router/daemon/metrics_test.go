package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/capture/capturetest"
)

// scrape fetches http://addr/metrics; ok is false when nothing answers there.
func scrape(t *testing.T, addr string) (body string, ok bool) {
	t.Helper()
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s, %v", addr, resp.Status, err)
	}
	return string(b), true
}

// waitClosed waits (up to 3 s) until nothing accepts on addr.
func waitClosed(t *testing.T, addr string) {
	t.Helper()
	if !wait.Poll(3*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}) {
		t.Errorf("%s still accepts", addr)
	}
}

func metricsTable(port uint16) string {
	return fmt.Sprintf("[metrics]\nlisten = \"127.0.0.1:%d\"\n", port)
}

// TestMetricsFollowReload: the endpoint serves the numbers `router status` shows, moves
// when a reload changes its address, stays where it was when a reload fails (its new
// socket closed again), and goes when the table goes.
func TestMetricsFollowReload(t *testing.T) {
	s := newScene(t)
	allow := "127.0.0.0/8"
	p1 := freePort(t)
	s.write(s.text(allow, metricsTable(p1)))
	pf := &capturetest.Platform{}
	d := s.daemon(pf, nil)
	s.start(d)
	a1 := fmt.Sprintf("127.0.0.1:%d", p1)

	// One forward connection: the flow counters move, as status shows them.
	if got := banner(t, s.fwd); got != "model\n" {
		t.Fatalf("forward said %q", got)
	}
	var body string
	_ = wait.Poll(3*time.Second, func() bool { // the flow ended; the lines below say what is missing
		var ok bool
		if body, ok = scrape(t, a1); !ok {
			t.Fatalf("nothing serves metrics on %s", a1)
		}
		return strings.Contains(body, "\nrouter_flows_live 0\n")
	})
	st := d.status.Status()
	for _, line := range []string{
		fmt.Sprintf("router_flows_total %d", st.Totals.Flows),
		fmt.Sprintf(`router_bytes_total{direction="down"} %d`, st.Totals.Down),
		`router_rule_flows_total{action="proxy",index="1",rule="vm"} 0`,
		`router_refusals_total{reason="forward-source"} 0`,
		"router_flows_live 0",
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	if st.Totals.Flows != 1 || st.Totals.Down != uint64(len("model\n")) {
		t.Errorf("status totals %+v, want one flow of %d bytes down", st.Totals, len("model\n"))
	}

	// A move.
	p2 := freePort(t)
	a2 := fmt.Sprintf("127.0.0.1:%d", p2)
	s.write(s.text(allow, metricsTable(p2)))
	if err := d.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := scrape(t, a2); !ok {
		t.Fatalf("after the move, nothing serves on %s", a2)
	}
	waitClosed(t, a1)

	// A move to a taken port fails whole.
	old := d.cfg
	s.write(s.text(allow, fmt.Sprintf("[metrics]\nlisten = %q\n", takenAddr(t))))
	if err := d.reload(context.Background()); err == nil || !strings.Contains(err.Error(), "metrics listener") {
		t.Fatalf("reload onto a taken port = %v", err)
	}
	if d.cfg != old {
		t.Error("the failed reload changed the config")
	}
	if _, ok := scrape(t, a2); !ok {
		t.Fatalf("after a failed reload, nothing serves on %s", a2)
	}

	// A move the capture refuses: the new socket is closed again.
	p3 := freePort(t)
	s.write(s.text(allow, metricsTable(p3)))
	pf.SetInstallError(errors.New("nft refused"))
	if err := d.reload(context.Background()); err == nil {
		t.Fatal("the reload passed a refused install")
	}
	pf.SetInstallError(nil)
	wantFree(t, fmt.Sprintf("127.0.0.1:%d", p3), "the refused reload left its metrics socket open")
	if _, ok := scrape(t, a2); !ok {
		t.Fatalf("after a refused install, nothing serves on %s", a2)
	}

	// Off.
	s.write(s.text(allow, ""))
	if err := d.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d.metrics != nil {
		t.Error("metrics still running after the table went")
	}
	waitClosed(t, a2)
}

// TestMetricsPortTakenAtStart: a daemon that cannot open its metrics socket does not start.
func TestMetricsPortTakenAtStart(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", fmt.Sprintf("[metrics]\nlisten = %q\n", takenAddr(t))))
	err := Run(context.Background(), Options{ConfigPath: s.path, Platform: &capturetest.Platform{}, Log: slog.New(slog.DiscardHandler), Grace: time.Second})
	if err == nil || !strings.Contains(err.Error(), "metrics listener") {
		t.Fatalf("Run = %v, want the metrics listener's error", err)
	}
	wantFree(t, s.fwd.String(), "the forward's address stayed taken")
}
