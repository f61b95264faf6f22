package checkip

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestMainHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main(context.Background(), []string{arg}, &stdout, &stderr, Deps{Dialer: &loopbackDialer{}}); code != ExitOK {
				t.Errorf("exit code %d, want 0", code)
			}
			if stdout.String() != Help() {
				t.Errorf("stdout is not the help text:\n%s", stdout.String())
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr = %q, want nothing", stderr.String())
			}
		})
	}
	t.Run("every flag is documented", func(t *testing.T) {
		if _, _, err := parseArgs([]string{"--help"}, io.Discard); err != flag.ErrHelp {
			t.Fatalf("parseArgs(--help) = %v, want flag.ErrHelp", err)
		}
		for _, name := range []string{"echo", "echo6", "stun", "expect", "expect-not", "model", "dns-whoami", "no-udp", "no-ipv6", "timeout", "json"} {
			if !strings.Contains(Help(), "  --"+name+" ") {
				t.Errorf("help does not document --%s", name)
			}
			if _, _, err := parseArgs([]string{"--" + name + "=x"}, io.Discard); err != nil && strings.Contains(err.Error(), "not defined") {
				t.Errorf("--%s is documented but not defined", name)
			}
		}
		for _, u := range append(DefaultEcho(), DefaultSTUN()...) {
			if !strings.Contains(Help(), u) {
				t.Errorf("help does not list the default %s", u)
			}
		}
	})
}

func TestMainUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown flag", []string{"--bogus"}, "flag provided but not defined"},
		{"positional", []string{"extra"}, `unexpected argument "extra"`},
		{"bad expect", []string{"--expect", "proxy.example"}, `--expect "proxy.example" is not an IP address`},
		{"expect with zone", []string{"--expect", "fe80::1%eth0"}, "not an IP address"},
		{"bad expect-not", []string{"--expect-not", "1.2.3"}, "--expect-not"},
		{"same address", []string{"--expect", "192.0.2.1", "--expect-not", "192.0.2.1"}, "the same address"},
		{"bad timeout", []string{"--timeout", "soon"}, "invalid value"},
		{"zero timeout", []string{"--timeout", "0s"}, "--timeout 0s"},
		{"empty echo", []string{"--echo", ""}, "empty value"},
		{"bad echo url", []string{"--echo", "ftp://x/"}, `echo url "ftp://x/"`},
		{"bad stun", []string{"--stun", "nohost"}, `stun target "nohost"`},
		{"bad model", []string{"--model", "ftp://x"}, "model url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			d := &loopbackDialer{}
			code := Main(context.Background(), tt.args, &stdout, &stderr, Deps{Dialer: d, Resolver: fakeResolver{}})
			if code != ExitUsage {
				t.Errorf("exit code %d, want %d", code, ExitUsage)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
			if len(d.Refused()) > 0 {
				t.Errorf("a usage error still dialed: %q", d.Refused())
			}
		})
	}
}

// whoamiDNS serves DNS on a loopback port, over UDP or TCP (network), answering every A and
// TXT question with the address the query came from, as whoami servers do. It returns a
// Resolver (the Go resolver, on Windows too) that asks only this server.
func whoamiDNS(t *testing.T, network string) Resolver {
	t.Helper()
	srv := &dns.Server{Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		from, _ := netip.ParseAddrPort(w.RemoteAddr().String())
		for _, q := range req.Question {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0, Rrtype: q.Qtype}
			switch q.Qtype {
			case dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: from.Addr().AsSlice()})
			case dns.TypeTXT:
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr, Txt: []string{from.Addr().String()}})
			}
		}
		w.WriteMsg(m)
	})}
	var addr string
	switch network {
	case "udp":
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen udp: %v", err)
		}
		srv.PacketConn, addr = pc, pc.LocalAddr().String()
	default:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen tcp: %v", err)
		}
		srv.Listener, addr = l, l.Addr().String()
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("dns server did not start")
	}
	t.Cleanup(func() { srv.Shutdown() })
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr) // a stream conn makes the Go resolver speak TCP
	}}
}

// TestMainLoopback runs the whole command, as the guest would, against loopback servers: an
// echo server, a model server, a silent UDP target and a whoami DNS server, through the real
// network stack (a dialer that allows loopback only). It also runs on Windows under Wine.
func TestMainLoopback(t *testing.T) {
	echo := newServer(t, plainEcho)
	model := modelServer(t, "/v1/models", `{"object":"list","data":[{"id":"qwen2.5-coder-32b"}]}`)
	// Under Wine no UDP socket can be made (see udpUsable): DNS goes over TCP there, and the UDP
	// check must say it could not probe.
	udp := udpUsable(t)
	silent, dnsNet := "127.0.0.1:9", "tcp"
	udpLine, verdictOK := "✓ udp   no answer from 1 STUN address within 3s", "verdict: ok, exit 127.0.0.1: every check that ran passed"
	if udp {
		silent, dnsNet = udpServer(t, func([]byte, netip.AddrPort) []byte { return nil }), "udp"
	} else {
		udpLine, verdictOK = "? udp   not probed: ", "verdict: ok, exit 127.0.0.1: no check failed, 1 undecided"
	}
	resolver := whoamiDNS(t, dnsNet)
	base := []string{"--echo", echo.URL, "--model", strings.TrimPrefix(model.URL, "http://"),
		"--dns-whoami", "whoami.test.", "--timeout", "3s"}
	// Only the first case waits out UDP silence (the full timeout); the others skip UDP.

	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // lines of the text output, in order, each a prefix
	}{
		{"cage holds", []string{"--expect", "127.0.0.1", "--expect-not", "192.0.2.1", "--stun", silent}, ExitOK, []string{
			"✓ exit  127.0.0.1 via " + echo.URL + ", as expected",
			"✓ model qwen2.5-coder-32b in ",
			"✓ dns   whoami.test. answers 127.0.0.1: the resolver's queries leave through the exit",
			udpLine,
			"✓ ipv6  no IPv6 route",
			verdictOK,
		}},
		{"exit is not the proxy", []string{"--expect", "198.51.100.7", "--no-udp"}, ExitFail, []string{
			"✗ exit  127.0.0.1 via " + echo.URL + ", expected 198.51.100.7",
			"✓ model ",
			"✓ dns   ",
			"- udp   not checked (--no-udp)",
			"✓ ipv6  ",
			"verdict: FAIL (exit)",
		}},
		{"exit is home", []string{"--expect-not", "127.0.0.1", "--no-udp"}, ExitFail, []string{
			"✗ exit  127.0.0.1 via " + echo.URL + ": this is the --expect-not address",
			"✓ model ",
			"✗ dns   whoami.test. answers 127.0.0.1, the --expect-not address: DNS leaks",
			"- udp   not checked (--no-udp)",
			"✓ ipv6  ",
			"verdict: FAIL (exit, dns)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			d := &loopbackDialer{}
			start := time.Now()
			code := Main(context.Background(), append(append([]string(nil), base...), tt.args...), &stdout, &stderr,
				Deps{Dialer: d, Resolver: resolver})
			t.Logf("took %v", time.Since(start))
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d\n%s%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(tt.want), stdout.String())
			}
			for i, want := range tt.want {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("line %d = %q, want it to start with %q", i+1, lines[i], want)
				}
			}
			for _, r := range d.Refused() {
				if !strings.Contains(r, "2001:db8::1") {
					t.Errorf("dial to a non-loopback destination was attempted: %s", r)
				}
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append(append([]string(nil), base...), "--expect", "198.51.100.7", "--no-udp", "--json"),
			&stdout, &stderr, Deps{Dialer: &loopbackDialer{}, Resolver: resolver})
		if code != ExitFail {
			t.Errorf("exit code %d, want %d", code, ExitFail)
		}
		got := decodeJSON(t, stdout.Bytes())
		if got.ExitCode != code || got.Verdict != "fail" {
			t.Errorf("json exit_code %d verdict %q, want %d fail", got.ExitCode, got.Verdict, code)
		}
		if got.Exit.Status != "fail" || got.Exit.Address != "127.0.0.1" || got.Exit.URL != echo.URL {
			t.Errorf("exit = %+v", got.Exit)
		}
		if got.Model.Status != "pass" || len(got.Model.IDs) != 1 || got.Model.IDs[0] != "qwen2.5-coder-32b" || got.Model.MS == nil {
			t.Errorf("model = %+v", got.Model)
		}
		if got.DNS.Status != "pass" || len(got.DNS.Answers) != 1 || got.DNS.Answers[0] != "127.0.0.1" {
			t.Errorf("dns = %+v", got.DNS)
		}
		if got.UDP.Status != "skipped" || got.IPv6.Status != "pass" || got.IPv6.Route == nil || *got.IPv6.Route {
			t.Errorf("udp = %+v, ipv6 = %+v", got.UDP, got.IPv6)
		}
	})

	t.Run("nothing answers", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		dead := "http://" + l.Addr().String() + "/"
		l.Close()
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), []string{"--echo", dead, "--no-udp", "--no-ipv6", "--timeout", "500ms"},
			&stdout, &stderr, Deps{Dialer: &loopbackDialer{}, Resolver: resolver})
		if code != ExitNoAnswer {
			t.Errorf("exit code %d, want %d\n%s", code, ExitNoAnswer, stdout.String())
		}
		if !strings.Contains(stdout.String(), "verdict: cannot tell") {
			t.Errorf("output:\n%s", stdout.String())
		}
	})
}
