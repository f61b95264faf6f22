package nftcap

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

func typicalSpec() Spec {
	return Spec{
		Table:        "router",
		VMNetworks:   []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24"), netip.MustParsePrefix("fd00:122::/64")},
		Local:        true,
		ListenerPort: 7070,
		DNSPort:      7053,
		Forwards: []Forward{{
			Listen: netip.MustParseAddrPort("192.168.122.1:47831"),
			Allow:  []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24")},
		}},
		Mark: 0x2a,
	}
}

var countersRE = regexp.MustCompile(`counter packets \d+ bytes \d+`)

// listTable returns `nft list table inet <name>` in ns with counters zeroed, or "" when the
// table does not exist.
func listTable(t *testing.T, ns *netns, name string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns.name, "nft", "list", "table", "inet", name).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return ""
		}
		t.Fatalf("nft list table inet %s: %v\n%s", name, err, out)
	}
	return countersRE.ReplaceAllString(string(out), "counter packets 0 bytes 0")
}

func installed(t *testing.T, ns *netns, name string) bool {
	t.Helper()
	ok, err := Installed(name, WithNetNS(ns.fd))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestInstallRemove(t *testing.T) {
	ref := newNetNS(t, "ref")
	ns := newNetNS(t, "ins")
	a := typicalSpec()
	b := typicalSpec()
	b.ListenerPort, b.DNSPort, b.Local = 7071, 0, false
	b.VMNetworks = append(b.VMNetworks, netip.MustParsePrefix("10.0.2.0/24"))
	want := func(s Spec) string {
		t.Helper()
		if err := Install(s, WithNetNS(ref.fd)); err != nil {
			t.Fatal(err)
		}
		return listTable(t, ref, s.table())
	}
	wantA, wantB := want(a), want(b)
	if wantA == wantB {
		t.Fatal("specs a and b give the same table")
	}

	t.Run("fresh", func(t *testing.T) {
		if installed(t, ns, "router") {
			t.Fatal("table present before Install")
		}
		if err := Install(a, WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if got := listTable(t, ns, "router"); got != wantA {
			t.Errorf("table after Install:\n%s\nwant:\n%s", got, wantA)
		}
		if !installed(t, ns, "router") {
			t.Error("Installed = false after Install")
		}
	})
	t.Run("twice replaces", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			spec Spec
			want string
		}{{"b over a", b, wantB}, {"b over b", b, wantB}, {"a over b", a, wantA}} {
			if err := Install(tc.spec, WithNetNS(ns.fd)); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := listTable(t, ns, "router"); got != tc.want {
				t.Errorf("%s: table:\n%s\nwant:\n%s", tc.name, got, tc.want)
			}
		}
	})
	t.Run("over a stale table", func(t *testing.T) {
		// What a crashed older version might have left: other chains, sets, a drop policy.
		ns.nft(t, `
delete table inet router
table inet router {
	set vm4 { type ipv4_addr; elements = { 10.9.9.9 } }
	set junk { type inet_service; elements = { 1, 2 } }
	chain stale_input { type filter hook input priority 10; policy drop; }
	chain prerouting { type nat hook prerouting priority dstnat; tcp dport 1 redirect to :1; }
	chain stale { counter; }
}`)
		if err := Install(b, WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if got := listTable(t, ns, "router"); got != wantB {
			t.Errorf("table over a stale one:\n%s\nwant:\n%s", got, wantB)
		}
	})
	t.Run("refused batch keeps the old table", func(t *testing.T) {
		// A batch the kernel refuses (a goto to a chain that does not exist) must leave
		// the installed table exactly as it was: no moment without a guard.
		c, err := nftables.New(nftables.WithNetNSFd(ns.fd))
		if err != nil {
			t.Fatal(err)
		}
		bl := &builder{c: c}
		if err := bl.replace(a); err != nil {
			t.Fatal(err)
		}
		bl.rule(chainInput, goTo("no_such_chain"))
		if err := c.Flush(); err == nil {
			t.Fatal("kernel accepted a goto to a missing chain")
		}
		if got := listTable(t, ns, "router"); got != wantB {
			t.Errorf("table after a refused batch:\n%s\nwant the old one:\n%s", got, wantB)
		}
	})
	t.Run("other tables untouched", func(t *testing.T) {
		ns.nft(t, "table inet other {\n chain c {\n  type filter hook input priority 0; policy accept;\n }\n}\n")
		if err := Install(a, WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if err := Remove("router", WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if listTable(t, ns, "other") == "" {
			t.Error("table inet other vanished")
		}
	})
	t.Run("remove", func(t *testing.T) {
		if err := Install(a, WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if err := Remove("router", WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if got := listTable(t, ns, "router"); got != "" {
			t.Errorf("table after Remove:\n%s", got)
		}
		if installed(t, ns, "router") {
			t.Error("Installed = true after Remove")
		}
	})
	t.Run("remove absent is no error", func(t *testing.T) {
		for i := range 2 {
			if err := Remove("router", WithNetNS(ns.fd)); err != nil {
				t.Fatalf("Remove #%d of an absent table: %v", i+1, err)
			}
		}
	})
	t.Run("own table name", func(t *testing.T) {
		s := a
		s.Table = "router_test"
		if err := Install(s, WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
		if !installed(t, ns, "router_test") || installed(t, ns, "router") {
			t.Error("Install with Table=router_test did not make exactly that table")
		}
		if err := Remove("router_test", WithNetNS(ns.fd)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("invalid spec installs nothing", func(t *testing.T) {
		s := a
		s.ListenerPort = 0
		if err := Install(s, WithNetNS(ns.fd)); err == nil {
			t.Fatal("Install accepted a spec without listener port")
		}
		if installed(t, ns, "router") {
			t.Error("table present after a refused Install")
		}
	})
}

// TestPrintTypicalRuleset logs the table for typicalSpec, for review (go test -v -run Print).
func TestPrintTypicalRuleset(t *testing.T) {
	ns := newNetNS(t, "print")
	if err := Install(typicalSpec(), WithNetNS(ns.fd)); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + listTable(t, ns, "router"))
}

const helperEnv = "NFTCAP_TEST_HELPER_NETNS"

// TestHelperInstallAndWait is not a test: run by TestGuardSurvivesKill as a child process, it
// installs the scene's table in the namespace named by $NFTCAP_TEST_HELPER_NETNS, says
// "installed" and waits to be killed.
func TestHelperInstallAndWait(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		return // an ordinary test run: nothing to do
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(sceneSpec(), WithNetNS(fd)); err != nil {
		t.Fatal(err)
	}
	fmt.Println("installed")
	time.Sleep(30 * time.Second) // not ordering: the helper waits to be killed, the event; 30 s is its ceiling
	t.Fatal("helper was not killed")
}

// TestGuardSurvivesKill: the router process dies by SIGKILL; its table stays and keeps the
// VM caged (TCP refused, nothing forwarded).
func TestGuardSurvivesKill(t *testing.T) {
	s := newScene(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperInstallAndWait$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=/run/netns/"+s.host.name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "installed" {
				line <- sc.Text()
			}
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok || l != "installed" {
			t.Fatal("helper exited before installing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not install within 10s")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL, to the PID we started
		t.Fatal(err)
	}
	cmd.Wait()

	if !installed(t, s.host, "router") {
		t.Fatal("table gone after the installing process was killed")
	}
	s.noLeak(t, func() {
		expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr4, 80))
		expectRefused(t, s.vm, net.Dialer{}, hostPort(netAddr6, 80))
		expectRefused(t, s.vm, net.Dialer{}, hostPort(hostVM4, 22))
		if _, _, err := udpExchange(t, s.vm, hostPort(netAddr4, 443), 300*time.Millisecond); err == nil {
			t.Error("udp from the vm answered after the router died")
		}
	})
}
