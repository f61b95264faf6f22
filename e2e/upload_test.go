//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/router/control"
)

// uploadSink is an HTTP server on the lab's internet side that reads each request's body
// to its end and answers how many bytes it read; it keeps the largest body it was sent,
// whole or cut.
type uploadSink struct {
	mu      sync.Mutex
	largest int64
}

func (s *scene) uploadSink(address string) *uploadSink {
	u := &uploadSink{}
	s.service(s.lab.Inet(), address, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, req.Body)
		u.mu.Lock()
		u.largest = max(u.largest, n)
		u.mu.Unlock()
		body := strconv.FormatInt(n, 10)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	})
	return u
}

func (u *uploadSink) max() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.largest
}

// TestUploadBudget: with [budget] bytes_up_per_domain = "1MB", a guest that uploads 4 MB
// with curl through the upstream proxy to a name under lab.test is cut mid-stream (the
// server never reads more than the budget), and its next upload there is refused; the same
// guest's upload to another "domain" (the server's address, a flow without a name) and the
// second guest's upload to the name pass whole. Status, the refusals and the console (in
// Chromium) show it.
func TestUploadBudget(t *testing.T) {
	const budget = 1_000_000
	s := newLab(t, twoGuestConfig(lab.GoSocksAddr, "[budget]\nbytes_up_per_domain = \"1MB\"\nwindow = \"10m\"\n[console]\nlisten = \"127.0.0.1:9478\"\n"))
	guest2 := s.secondGuest()
	sink := s.uploadSink(lab.ServiceAddr + ":8080")
	s.startRouter()
	byName := "http://" + lab.EchoName + ":8080/upload"
	byAddr := "http://" + lab.ServiceAddr + ":8080/upload"
	upload := func(ns *lab.Netns, url string, n int) (string, int) {
		return run(s.ctx, ns, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero | curl -sS --max-time 20 -H 'Expect:' --data-binary @- %s", n, url))
	}

	if out, code := upload(s.lab.Guest(), byName, 4*budget); code == 0 {
		t.Fatalf("an upload of 4 times the budget went through: %q", out)
	} else {
		t.Logf("the upload over the budget: curl exit %d: %s", code, strings.TrimSpace(out))
	}
	if n := sink.max(); n > budget {
		t.Fatalf("the server read %d bytes of the upload, past the budget of %d", n, budget)
	}
	if out, code := upload(s.lab.Guest(), byName, 1000); code == 0 {
		t.Errorf("the guest's next upload to the domain went through: %q", out)
	}
	for _, tc := range []struct {
		what string
		ns   *lab.Netns
		url  string
	}{{"the guest to another domain (an address)", s.lab.Guest(), byAddr}, {"the second guest to the domain", guest2, byName}} {
		if out, code := upload(tc.ns, tc.url, budget/2); code != 0 || strings.TrimSpace(out) != strconv.Itoa(budget/2) {
			t.Errorf("%s: curl exit %d, %q; want %d bytes read", tc.what, code, out, budget/2)
		}
	}

	st := s.status()
	var refused uint64
	for _, r := range st.Refusals {
		if r.Reason == "budget" {
			refused = r.Count
		}
	}
	if refused != 2 {
		t.Errorf("budget refusals = %d, want 2 (the cut flow and the refused one): %+v", refused, st.Refusals)
	}
	want := map[string]func(control.DomainBudgetStat) bool{
		"vm 10.0.2.0/24 lab.test":                    func(u control.DomainBudgetStat) bool { return u.Over && u.Limit == budget },
		"vm 10.0.2.0/24 203.0.113.10":                func(u control.DomainBudgetStat) bool { return !u.Over && u.Used >= budget/2 },
		"vm " + lab.SecondGuestNetwork + " lab.test": func(u control.DomainBudgetStat) bool { return !u.Over && u.Used >= budget/2 },
	}
	for _, u := range st.DomainBudgets {
		if u.Budget != control.BudgetBytesUp {
			continue
		}
		if ok, found := want[u.Guest+" "+u.Domain]; found {
			if !ok(u) {
				t.Errorf("upload count %+v", u)
			}
			delete(want, u.Guest+" "+u.Domain)
		}
	}
	if len(want) > 0 {
		t.Errorf("status lacks upload counts %v: %+v", want, st.DomainBudgets)
	}
	if out, code := s.routerCmd("status", "--config", s.cfg); code != 0 || !strings.Contains(out, "bytes up") {
		t.Errorf("router status: exit %d, no upload budget:\n%s", code, out)
	}
	bctx := s.browser()
	if err := chromedp.Do(bctx, chromedp.Navigate(s.consoleURL()), chromedp.WaitVisible(chromedp.CSS(`#budgets tbody tr`))); err != nil {
		t.Fatalf("the console shows no budgets: %v", err)
	}
	shown, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#budgets tbody`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bytes up", "lab.test", "over", "1.0 MB", lab.SecondGuestNetwork} {
		if !strings.Contains(shown, want) {
			t.Errorf("the console's budgets lack %q: %q", want, shown)
		}
	}
	s.wantNoLeak("uploads")
}
