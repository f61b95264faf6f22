//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
)

// flowLogKeys is the [log] table the scenes of this file add: the flow log next to the
// config.
const flowLogKeys = "\n[log]\nflows = \"flows.jsonl\"\n"

// flowRecords waits (bounded) until the scene's flow log holds a record for which match is
// true, and returns every record read.
func (s *scene) flowRecords(match func(map[string]any) bool) []map[string]any {
	s.t.Helper()
	var recs []map[string]any
	if wait.Poll(5*time.Second, func() bool {
		recs = nil
		// [log] flows = "flows.jsonl" beside the config, or a learning session's default
		// in the state directory.
		path := filepath.Join(s.dir, "flows.jsonl")
		if _, err := os.Stat(path); err != nil {
			path = s.stateFile("flows.jsonl")
		}
		if f, err := os.Open(path); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var m map[string]any
				if json.Unmarshal(sc.Bytes(), &m) == nil {
					recs = append(recs, m)
				}
			}
			f.Close()
		}
		return slices.ContainsFunc(recs, match)
	}) {
		return recs
	}
	s.t.Fatalf("the flow log never held the record wanted; it holds:\n%v", recs)
	return nil
}

// inetService serves a small HTTP answer on address in the internet namespace until the
// test ends, and counts the connections it accepted.
func (s *scene) inetService(address, body string) *atomic.Int32 {
	return s.service(s.lab.Inet(), address, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 4096))
		c.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	})
}

// TestDoHRefused: with the scene's catch-all config (every guest flow through the proxy),
// a guest's connection to a well-known DoH resolver, by address (1.1.1.1, put on the lab's
// internet side) and by name (dns.google, through the router's DNS), is refused with reason
// doh and never reaches it; Firefox's canary is NXDOMAIN. With allow_doh = true, reloaded,
// the same resolver answers through the proxy: the refusal was the router's.
func TestDoHRefused(t *testing.T) {
	s := newLab(t, config(lab.GoSocksAddr, "")+flowLogKeys)
	if out, code := run(s.ctx, s.lab.Inet(), "ip", "addr", "add", "1.1.1.1/32", "dev", "lo"); code != 0 {
		t.Fatalf("add 1.1.1.1 in the lab's internet: %s", out)
	}
	doh := s.inetService("1.1.1.1:443", "doh\n")
	s.startRouter()

	if out, code := s.curl(s.lab.Guest(), "http://1.1.1.1:443/dns-query", "--max-time", "3"); gotThrough(out, code) {
		t.Errorf("the guest reached 1.1.1.1:443: %q", out)
	}
	if out, code := s.curl(s.lab.Guest(), "http://dns.google:443/dns-query", "--max-time", "3"); gotThrough(out, code) {
		t.Errorf("the guest reached dns.google:443: %q", out)
	}
	if n := doh.Load(); n != 0 {
		t.Errorf("the resolver accepted %d connections", n)
	}
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "refused" && m["reason"] == "doh" && m["dst"] == "1.1.1.1:443" && m["src"] != nil
	})
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "refused" && m["reason"] == "doh" && m["name"] == "dns.google" && m["name_from"] == "dns"
	})
	for _, tcp := range []string{"+notcp", "+tcp"} {
		out, _ := run(s.ctx, s.lab.Guest(), "dig", "+time=2", "+tries=1", tcp, "@"+lab.ServiceAddr, "use-application-dns.net", "A")
		if !strings.Contains(out, "status: NXDOMAIN") {
			t.Errorf("dig %s use-application-dns.net: want NXDOMAIN\n%s", tcp, out)
		}
	}
	out, code := run(s.ctx, s.lab.Host(), routerBin, "status", "--config", s.cfg)
	if code != 0 || !strings.Contains(out, "doh") {
		t.Errorf("status does not count the doh refusals: exit %d\n%s", code, out)
	}
	s.wantNoLeak("doh refused")

	// The control: the switch off, the same request gets through the proxy.
	s.writeConfig(config(lab.GoSocksAddr, "allow_doh = true") + flowLogKeys)
	s.router.Signal(syscall.SIGHUP)
	s.waitLog("reloaded", 5*time.Second)
	if out, code := s.curl(s.lab.Guest(), "http://1.1.1.1:443/dns-query"); code != 0 || out != "doh\n" {
		t.Errorf("with allow_doh the guest's request failed: exit %d, %q", code, out)
	}
	if doh.Load() == 0 {
		t.Error("with allow_doh the resolver saw nothing")
	}
	s.wantNoLeak("doh allowed")
}

// listRules replace the scene's "vm" rule: the guest may reach what allow/lab.txt lists,
// through the proxy, and Go's module proxy (a preset) is blocked; the rest of its traffic
// is refused (caged, no rule).
const listRules = `[[rule]]
name = "go-preset"
hosts_preset = ["go"]
action = "block"

[[rule]]
name = "listed"
hosts_file = ["allow/lab.txt"]
action = "proxy"
`

const vmRule = "[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]\naction = \"proxy\"\n"

func (s *scene) writeHostsFile(text string) {
	s.t.Helper()
	if err := os.MkdirAll(filepath.Join(s.dir, "allow"), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "allow", "lab.txt"), []byte(text), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// TestHostListsInRules: a hosts file and a preset decide in rules; the flow log holds the
// allowed flow (name, rule, bytes) and the refused ones (reason); a bad line in the hosts
// file is reported at its file and line by lint (load) and by a reload, which keeps the
// running rules.
func TestHostListsInRules(t *testing.T) {
	cfg := strings.Replace(config(lab.GoSocksAddr, ""), vmRule, listRules, 1) + flowLogKeys
	if !strings.Contains(cfg, "listed") {
		t.Fatal("the scene's config has no vm rule to replace")
	}
	s := newLab(t, cfg)
	s.writeHostsFile("# the lab's echo server\necho.lab.test\n\n" + lab.ServiceAddr + "/32 # by address too\n")
	s.startRouter()

	out, code := s.curl(s.lab.Guest(), "http://"+lab.EchoName+"/")
	if code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("a listed name: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Fatalf("a listed address: exit %d, %q", code, out)
	}
	if out, code := s.curl(s.lab.Guest(), "http://proxy.golang.org/", "--max-time", "3"); gotThrough(out, code) {
		t.Errorf("the go preset's block rule let proxy.golang.org through: %q", out)
	}
	if out, code := s.curl(s.lab.Guest(), "http://"+lab.ExitAddr+"/", "--max-time", "3"); gotThrough(out, code) {
		t.Errorf("an unlisted address got through: %q", out)
	}
	s.flowRecords(func(m map[string]any) bool {
		up, _ := m["up"].(float64)
		down, _ := m["down"].(float64)
		return m["event"] == "flow" && m["name"] == lab.EchoName && m["name_from"] == "dns" && m["rule"] == "listed" &&
			m["action"] == "proxy" && m["upstream"] == "exit" && up > 0 && down > 0 && m["duration_ms"] != nil
	})
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "refused" && m["name"] == "proxy.golang.org" && m["rule"] == "go-preset" && m["reason"] == "rule"
	})
	s.flowRecords(func(m map[string]any) bool {
		return m["event"] == "refused" && m["dst"] == lab.ExitAddr+":80" && m["reason"] == "caged-no-rule"
	})
	s.wantNoLeak("host lists")

	// A bad line: lint names the file and the line; a reload refuses the file and keeps
	// the rules that run.
	hosts := filepath.Join(s.dir, "allow", "lab.txt")
	s.writeHostsFile("echo.lab.test\n# fine\nnot a host\n")
	out, code = run(s.ctx, s.lab.Host(), routerBin, "lint", "--config", s.cfg)
	if code == 0 || !strings.Contains(out, hosts+":3: ") {
		t.Errorf("lint of a bad hosts file: exit %d, want %s:3\n%s", code, hosts, out)
	}
	s.router.Signal(syscall.SIGHUP)
	s.waitLog("reload failed", 5*time.Second)
	if !strings.Contains(s.log(), hosts+":3: ") {
		t.Errorf("the reload error does not name %s:3:\n%s", hosts, s.log())
	}
	if out, code := s.curl(s.lab.Guest(), lab.EchoURL); code != 0 || strings.TrimSpace(out) != lab.ExitAddr {
		t.Errorf("after a bad reload the running rules changed: exit %d, %q", code, out)
	}
}
