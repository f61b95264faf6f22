package router

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/agentcage/router/dns/dnstest"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
	"github.com/agentcage/router/rules/policy/policytest"
)

// clientHello is what crypto/tls sends first as a client asking for name: all it writes
// before it reads.
func clientHello(t *testing.T, name string) []byte {
	t.Helper()
	var w firstWrites
	if err := tls.Client(&w, &tls.Config{ServerName: name}).Handshake(); err == nil {
		t.Fatal("a handshake with no server succeeded")
	}
	if len(w.b) == 0 {
		t.Fatal("the client sent nothing")
	}
	return w.b
}

// firstWrites is the connection of a client whose server never answers: it keeps what the
// client writes and ends the client's first read. Only Write and Read are called.
type firstWrites struct {
	net.Conn
	b []byte
}

func (w *firstWrites) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *firstWrites) Read([]byte) (int, error) { return 0, io.EOF }

// firstBytes is what a case's client sends: a ClientHello, an HTTP/1 request, or nothing.
func firstBytes(t *testing.T, from, name string) []byte {
	switch from {
	case "sni":
		return clientHello(t, name)
	case "host":
		return []byte("GET / HTTP/1.1\r\nHost: " + name + "\r\nAccept: */*\r\n\r\n")
	}
	return nil
}

// nameSettings are the settings of NameConfig with its proxy at p.
func nameSettings(t *testing.T, proxy netip.AddrPort) Settings {
	t.Helper()
	env := policytest.Env()
	env.Scoped = false
	return exitSettings(casePolicy(t, "names.toml", policytest.NameConfig, env), proxy.Port())
}

var nameFromRecord = regexp.MustCompile(`msg=flow .* host=(\S+) name_from=(\S+)`)

// TestNameCases: each allow-list-by-name case through its path, decided as the policy and
// explain do: a TCP case through the relay (nameCaseRelay), a UDP one through the UDP path
// (nameCaseUDP).
func TestNameCases(t *testing.T) {
	p := startProxy(t, nil, nil) // it dials loopback only: no case's traffic leaves
	for _, c := range policytest.NameCases() {
		t.Run(c.Name, func(t *testing.T) {
			if c.Flow.Network == rules.TCP {
				nameCaseRelay(t, p, c)
			} else {
				nameCaseUDP(t, c)
			}
		})
	}
}

// nameCaseRelay: the relay reads the case's name from the client's first bytes and decides
// it; the name it hands the proxy p is the flow's, and the log says where it came from.
func nameCaseRelay(t *testing.T, p *socks5test.Server, c policytest.NameCase) {
	fl := c.Flow
	opts := caseOptions(fl, netip.AddrPortFrom(fl.Dst, fl.Port), &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: policytest.NameFakes})
	e := newEnv(t, nameSettings(t, p.Addr), opts)
	before := len(p.Asked())
	e.dialCapture(firstBytes(t, c.From, fl.Sniffed))
	e.wantRecorded("relay", c.Action, c.Rule)
	name, from := fl.Host, "dns"
	if name == "" {
		name, from = fl.Sniffed, c.From
	}
	if name != "" {
		n := nameFromRecord.FindStringSubmatch(e.logs.String())
		if n == nil || n[1] != name || n[2] != from {
			t.Errorf("record names %q, want host=%s name_from=%s:\n%s", n, name, from, e.logs.String())
		}
	}
	asked := p.Asked()[before:]
	if c.Action == rules.Proxy && !slices.Contains(asked, name) {
		t.Errorf("the proxy was asked for %q, want %q", asked, name)
	}
	if c.Action != rules.Proxy && len(asked) > 0 {
		t.Errorf("the proxy was asked for %q for a refused flow", asked)
	}
}

// TestSniffedBytesUntouched: the bytes the router read for the name reach the destination as
// the client sent them, followed by the rest of the stream; a server-speaks-first protocol
// to a fake IP's name gets no name from its bytes, after the wait, and still goes through.
func TestSniffedBytesUntouched(t *testing.T) {
	target := startTarget(t, "")
	banner := startTarget(t, "SSH-2.0-target\r\n")
	p := startProxy(t, map[string]netip.Addr{"allowed.test": loopback, "www.allowed.test": loopback}, nil)
	hello := clientHello(t, "www.allowed.test")
	split := append([]byte{}, hello[:5+4]...) // the record header and handshake header
	rest := hello[5+4:]
	for _, c := range []struct {
		name   string
		dst    netip.AddrPort
		chunks [][]byte // written one by one, a pause between
		banner string
		from   string // the name's origin status shows
	}{
		{"a ClientHello in one write", target, [][]byte{hello, []byte("after")}, "", "sni"},
		{"a ClientHello in pieces", target, [][]byte{split, rest[:10], rest[10:], []byte("after")}, "", "sni"},
		{"a ClientHello over several records", target, [][]byte{rerecord(hello, 64), []byte("after")}, "", "sni"},
		{"an HTTP request", target, [][]byte{[]byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), []byte("body")}, "", "host"},
		{"server speaks first, by the fake IP's name", netip.AddrPortFrom(policytest.AllowedFake, banner.Port()), [][]byte{[]byte("SSH-2.0-client\r\n")}, "SSH-2.0-target\r\n", "dns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nameSettings(t, p.Addr), Options{FromVM: func(netip.Addr) bool { return true },
				Names: &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: policytest.NameFakes}})
			cl := e.dial(c.dst)
			defer cl.Close()
			cl.SetDeadline(time.Now().Add(waitFor))
			var want []byte
			if c.banner != "" {
				got := make([]byte, len(c.banner))
				if _, err := io.ReadFull(cl, got); err != nil || string(got) != c.banner {
					t.Fatalf("banner %q, %v; log:\n%s", got, err, e.logs.String())
				}
			}
			for _, b := range c.chunks {
				if _, err := cl.Write(b); err != nil {
					t.Fatal(err)
				}
				want = append(want, b...)
				time.Sleep(5 * time.Millisecond) // not ordering: a paced sender, so the pieces tend to come in separate reads (merged, they test less, not wrong)
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(cl, got); err != nil {
				t.Fatalf("echo: %v; log:\n%s", err, e.logs.String())
			}
			if string(got) != string(want) {
				t.Errorf("the destination got %q, the client sent %q", got, want)
			}
			if fl := e.r.Status().Flows; len(fl) != 1 || fl[0].NameFrom != c.from {
				t.Errorf("status shows %+v, want one flow named by %s", fl, c.from)
			}
		})
	}
}

// rerecord cuts a single-record ClientHello into records of size bytes of handshake each.
func rerecord(rec []byte, size int) []byte {
	msg := rec[5:]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, rec[0], rec[1], rec[2], byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// nameCaseUDP: the UDP path decides the case (QUIC refused unless a rule is written for
// UDP).
func nameCaseUDP(t *testing.T, c policytest.NameCase) {
	names := &dnstest.Names{Pool: netip.MustParsePrefix("198.18.0.0/15"), Names: policytest.NameFakes}
	e := newUDPEnv(t, names, nil)
	s := nameSettings(t, netip.MustParseAddrPort("192.0.2.1:1080"))
	s.IdleTimeout, s.ConnectTimeout = time.Minute, time.Second
	if err := e.r.Apply(s); err != nil {
		t.Fatal(err)
	}
	e.r.pol.Load().ups["exit"] = e.up
	e.send(netip.AddrPortFrom(c.Flow.Src, 40000), netip.AddrPortFrom(c.Flow.Dst, c.Flow.Port), "quic")
	if c.Action == rules.Proxy {
		sent(t, e.association(0), upstream.Addr{Name: c.Flow.Host, Port: c.Flow.Port}, "quic")
	} else {
		// HandleUDP decided the flow before it returned: nothing is being opened.
		if n := e.up.Associates(); n != 0 {
			t.Errorf("%d associations for a refused flow", n)
		}
	}
	if fl := e.r.Status().Flows; len(fl) != 1 || fl[0].Verdict.Name != c.Rule || fl[0].Verdict.Action != c.Action {
		t.Errorf("status %+v, want %s by %q", fl, c.Action, c.Rule)
	}
	if refused := e.r.Refusals(); c.Step == policy.StepQUIC && (len(refused) != 1 || refused[0].Reason.String() != "quic") {
		t.Errorf("refusals %+v, want one for quic", refused)
	}
}
